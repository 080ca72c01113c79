"""Environments as tools (TRL 1.16's ``environment_factory``): one environment instance per rollout, its public
methods the rollout's tools, its ``reset`` the start of the rollout and, when it has one, its ``get_reward`` a reward.

A factory (a class, or any callable returning an instance) is given alone (every row uses it) or as a dict
``{name: factory}``, a row choosing its environment by its ``environment`` column (only that environment's tools are
listed in its prompt). As in TRL:

- each factory is called once at start-up (the probe): its instance must have a callable ``reset``; its public
  methods (not ``reset``, not ``get_reward``, no leading underscore) are its tools, listed beside the run's own
  function tools. The probe is the first instance of the environment's pool.
- each round, rollout k of the round takes the next instance of its environment's pool (instances are made only when
  a round needs more of them at once than were made before: "construct once, reset often") and calls
  ``reset(**row)``: the row's columns (``environment`` left out with a dict), ``prompt`` included. A returned
  observation (a string) is appended to the prompt's last message (TRL: ``content + observation``); None adds nothing.
- a tool call runs the method of that rollout's own instance (``rlvr.rollout.function_tools``: TRL's result texts, the
  run's ``tool_timeout``).
- ``get_reward()`` (sync or async), when the class defines it, is one more reward function, weight 1, named after the
  class; it scores the rollouts of that exact class (None for others: not applicable). Reward functions also receive
  ``environments`` (the rollouts' instances, aligned with the completions).

The rollouts of one prompt may so see different prompts (a random game per rollout): each response is trained on the
prompt it was sampled from. These are the user's own objects, run in the trainer's process as TRL runs them (model
code never reaches them except through their methods' arguments). TRL makes, resets, calls and scores them all on one
thread (its main thread); here too they live on one thread of their own ("rlvr-environments"), so an object bound to
the thread that made it (a sqlite connection, say) works in every method. A synchronous method still running after
``tool_timeout`` fails the call and is abandoned: that thread (a daemon: a stuck method never holds the process at
exit) finishes it before it runs anything else. ``async`` methods run on the async tools' event loop and an ``async``
``get_reward`` on the async rewards' one, as TRL runs them on its own.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from rlvr.core.event_loop import daemon_event_loop
from rlvr.rollout.function_tools import function_runner, tool_result
from rlvr.rollout.tool_loop import ToolCall, ToolResult, ToolRunner

ENVIRONMENT_COLUMN = "environment"  # a row's environment, with a dict of factories (TRL's name)
_NOT_TOOLS = ("reset", "get_reward")


def _public_methods(instance) -> list[Callable]:
    """The instance's tools: its class's public functions but reset and get_reward, bound (TRL lists them on the class,
    so a property is never evaluated)."""
    return [getattr(instance, name) for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
            if name not in _NOT_TOOLS and not name.startswith("_")]


class Environments:
    """The run's environments: their probed tools, their pools, and their rewards (module docstring).

    Args:
        factories: ``{None: factory}`` (one environment for every row) or ``{name: factory}`` (a row's
            ``environment`` column picks one).
        standalone: the run's function tools, listed and callable in every rollout beside the environment's methods.
        timeout: seconds a method call may take (``tool_timeout``).
    """

    def __init__(self, factories: dict[str | None, Callable], standalone: tuple = (), *, timeout: float = 60.0):
        if not factories:
            raise ValueError("environment_factory: give a class (or a callable returning an environment), or a dict "
                             "{name: class}")
        self.factories, self.standalone, self.timeout = dict(factories), tuple(standalone), timeout
        # every instance is made, reset, called and scored on this one thread (module docstring)
        self._loop = daemon_event_loop("rlvr-environments")
        self.multi = None not in self.factories
        self.pools: dict[str | None, list] = {}
        self.tools: dict[str | None, list[Callable]] = {}  # per environment: the tools its prompts list
        self.reward_types: list[type] = []  # classes with get_reward, each once (a dict may name one class twice)
        for name in self.factories:
            instance = self._make(name)
            if not callable(getattr(instance, "reset", None)):
                raise ValueError(f"environment_factory{self._label(name)} made a {type(instance).__name__} without a "
                                 "callable reset(); each environment needs reset(self, **kwargs), which starts a "
                                 "rollout (it may return an observation, appended to the prompt)")
            methods = _public_methods(instance)
            names = [getattr(fn, "__name__", "") for fn in (*self.standalone, *methods)]
            clash = sorted({n for n in names if names.count(n) > 1})
            if clash:
                raise ValueError(f"environment_factory{self._label(name)}: two tools are called {clash[0]!r} (a method "
                                 "and a function of tools=, or two methods); the model calls a tool by its name, so "
                                 "rename one")
            self.tools[name] = [*self.standalone, *methods]
            self.pools[name] = [instance]
            if callable(getattr(type(instance), "get_reward", None)) and type(instance) not in self.reward_types:
                self.reward_types.append(type(instance))

    def _label(self, name) -> str:
        return "" if name is None else f"[{name!r}]"

    def _submit(self, fn, *args, **kwargs) -> Future:
        """``fn(*args, **kwargs)`` run on the environments' thread, after what it is running now."""
        async def call():
            return fn(*args, **kwargs)
        return asyncio.run_coroutine_threadsafe(call(), self._loop)

    def _on_thread(self, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` on the environments' thread (its exception raised here)."""
        return self._submit(fn, *args, **kwargs).result()

    def _make(self, name):
        factory = self.factories[name]
        try:
            instance = self._on_thread(factory)
        except Exception as error:
            raise ValueError(f"environment_factory{self._label(name)} ({getattr(factory, '__name__', factory)!r}) "
                             f"failed to make an environment: {type(error).__name__}: {error}. It is called with no "
                             "arguments once per rollout: give a class, or a function returning an instance") from error
        if instance is None:
            raise ValueError(f"environment_factory{self._label(name)} returned None; it must return an environment "
                             "instance (a class, or a function returning one)")
        return instance

    def all_tools(self) -> list[Callable]:
        """Every tool any rollout may call (the parser types arguments by them): the standalone functions, then each
        environment's methods (the probes', one per name)."""
        seen, out = set(), []
        for tools in self.tools.values():
            for fn in tools:
                if fn.__name__ not in seen:
                    seen.add(fn.__name__)
                    out.append(fn)
        return out

    def name_of(self, row: dict) -> str | None:
        """The environment ``row`` uses (None: the one environment)."""
        if not self.multi:
            return None
        name = row.get(ENVIRONMENT_COLUMN)
        if name not in self.factories:
            raise ValueError(f"row {row.get('id', '?')!r} has {ENVIRONMENT_COLUMN}={name!r}, which is not among the "
                             f"environments of environment_factory ({sorted(self.factories)}); give each row one of "
                             "them in its 'environment' column")
        return name

    def take(self, names: list[str | None]) -> list:
        """One instance per rollout, in order: the pool's first instances of each environment, made when missing."""
        cursor: dict[str | None, int] = {}
        out = []
        for name in names:
            index = cursor.get(name, 0)
            pool = self.pools[name]
            if index == len(pool):
                pool.append(self._make(name))
            cursor[name] = index + 1
            out.append(pool[index])
        return out

    def reset(self, instance, columns: dict) -> str | None:
        """Start a rollout: ``reset(**columns)`` (the environment column left out with a dict); its observation."""
        kwargs = {k: v for k, v in columns.items() if k != ENVIRONMENT_COLUMN} if self.multi else dict(columns)
        observation = self._on_thread(instance.reset, **kwargs)
        if observation is not None and not isinstance(observation, str):
            raise ValueError(f"{type(instance).__name__}.reset returned a {type(observation).__name__}; an "
                             "observation is a string (appended to the prompt's last message) or None")
        return observation

    def runners(self, instance) -> dict[str, ToolRunner]:
        """The tools one rollout's calls run: the standalone functions and the methods of its own instance."""
        runners = {fn.__name__: function_runner(fn, timeout=self.timeout) for fn in self.standalone}
        for method in _public_methods(instance):
            runners[method.__name__] = (function_runner(method, timeout=self.timeout)
                                        if inspect.iscoroutinefunction(method) else self._method_runner(method))
        return runners

    def _method_runner(self, method: Callable) -> ToolRunner:
        """A synchronous method's calls, one after another on the environments' thread, each with ``timeout``."""
        def run(calls: list[ToolCall]) -> list[ToolResult]:
            results = []
            for call in calls:
                future = self._submit(method, **call.arguments)
                try:
                    results.append(tool_result(future.result(timeout=self.timeout), False, self.timeout))
                except FutureTimeout:
                    results.append(tool_result(TimeoutError(), True, self.timeout))
                except Exception as error:  # noqa: BLE001  (the user's method: any error is the call's result)
                    results.append(tool_result(error, True, self.timeout))
            return results
        return run

    def reward_functions(self) -> list[Callable]:
        """Per class with ``get_reward``: a reward function of the rollouts' instances, named after the class."""
        return [self._class_reward(cls) for cls in self.reward_types]

    def _class_reward(self, cls: type) -> Callable:
        if inspect.iscoroutinefunction(cls.get_reward):
            async def get_reward(environments, **kwargs):
                return [await e.get_reward() if type(e) is cls else None for e in environments]
        else:
            def get_reward(environments, **kwargs):
                return self._on_thread(lambda: [e.get_reward() if type(e) is cls else None for e in environments])
        get_reward.__name__ = get_reward.__qualname__ = cls.__name__
        get_reward.environment_class = cls  # (a failure's advice names the user's method, not an rlvr reward)
        return get_reward

