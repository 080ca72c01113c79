"""Environments as tools (``environment_factory``, rlvr.rollout.environments): the probe, the pool, reset, the
rewards, the refusals; from Python, YAML and the command line. TRL's own trainer beside rlvr's on whole runs:
tests/conformance/test_trl_environments.py."""

from __future__ import annotations

import asyncio
import json

import pytest

from rlvr.config import build_config
from rlvr.rollout.environments import Environments
from rlvr.rollout.tool_loop import ToolCall


class Counter:
    made = 0

    def __init__(self):
        Counter.made += 1
        self.count, self.start = 0, None

    def reset(self, **row):
        self.count, self.start = 0, row.get("start", 0)
        return f" (start at {self.start})"

    def step(self, by: int) -> int:
        """Count up.

        Args:
            by: How much.
        """
        self.count += by
        return self.start + self.count

    def _private(self):
        raise AssertionError("not a tool")

    @property
    def evaluated(self):
        raise AssertionError("a property is never evaluated by the probe")

    def get_reward(self) -> float:
        return float(self.count)


class Door:
    def reset(self, **row):
        return None

    def knock(self) -> str:
        """Knock."""
        return "who is there?"

    async def get_reward(self) -> float:
        await asyncio.sleep(0)
        return 0.5


def shout(text: str) -> str:
    """Shout.

    Args:
        text: What.
    """
    return text.upper()


def test_the_probe_lists_public_methods_beside_the_standalone_tools_and_seeds_the_pool():
    Counter.made = 0
    envs = Environments({None: Counter}, (shout,), timeout=5)
    assert Counter.made == 1 and len(envs.pools[None]) == 1
    assert [fn.__name__ for fn in envs.tools[None]] == ["shout", "step"]
    assert [fn.__name__ for fn in envs.all_tools()] == ["shout", "step"]


def test_a_round_takes_the_pools_instances_in_order_and_makes_only_the_missing_ones():
    Counter.made = 0
    envs = Environments({None: Counter})
    first = envs.take([None] * 3)
    assert Counter.made == 3 and first[0] is envs.pools[None][0]  # the probe is reused
    again = envs.take([None] * 2)
    assert Counter.made == 3 and again == first[:2]


def test_reset_gets_the_row_and_the_calls_run_that_rollouts_own_instance():
    envs = Environments({None: Counter}, (shout,))
    a, b = envs.take([None, None])
    assert envs.reset(a, {"prompt": "p", "start": 10}) == " (start at 10)"
    envs.reset(b, {"prompt": "p", "start": 0})
    runners_a, runners_b = envs.runners(a), envs.runners(b)
    assert runners_a["step"]([ToolCall("step", {"by": 2})])[0].text == "12"
    assert runners_b["step"]([ToolCall("step", {"by": 1})])[0].text == "1"
    assert runners_a["shout"]([ToolCall("shout", {"text": "hi"})])[0].text == "HI"
    assert (a.count, b.count) == (2, 1)
    failed = runners_a["step"]([ToolCall("step", {"by": "x"})])[0]  # (the method raised: TRL's error text)
    assert failed.failed and failed.text.startswith("{'error': ")


def test_get_reward_is_a_reward_named_after_its_class_that_scores_only_its_class():
    envs = Environments({"counter": Counter, "door": Door})
    counter_reward, door_reward = envs.reward_functions()
    assert (counter_reward.__name__, door_reward.__name__) == ("Counter", "Door")
    c, d = envs.take(["counter", "door"])
    c.count = 3
    assert counter_reward(environments=[c, d]) == [3.0, None]
    assert asyncio.run(door_reward(environments=[c, d])) == [None, 0.5]


def test_a_dict_routes_rows_by_their_environment_column_and_keeps_it_out_of_reset():
    seen = {}

    class Spy(Counter):
        def reset(self, **row):
            seen.update(row)

    envs = Environments({"spy": Spy, "door": Door})
    assert envs.multi and envs.name_of({"environment": "door"}) == "door"
    envs.reset(envs.take(["spy"])[0], {"prompt": "p", "environment": "spy", "start": 1})
    assert seen == {"prompt": "p", "start": 1}
    with pytest.raises(ValueError, match="environment='cellar', which is not among the environments"):
        envs.name_of({"id": "r1", "environment": "cellar"})


@pytest.mark.parametrize("factory, message", [
    (lambda: object(), "without a callable reset"),
    (lambda: None, "returned None"),
])
def test_a_bad_environment_is_refused_at_the_probe(factory, message):
    with pytest.raises(ValueError, match=message):
        Environments({None: factory})


def test_a_method_named_as_a_standalone_tool_is_refused():
    class Shouty(Door):
        def shout(self, text: str) -> str:
            """Shout.

            Args:
                text: What.
            """
            return text

    with pytest.raises(ValueError, match="two tools are called 'shout'"):
        Environments({None: Shouty}, (shout,))


def test_a_non_string_observation_is_refused_with_its_type():
    class Numbers(Door):
        def reset(self, **row):
            return 7

    envs = Environments({None: Numbers})
    with pytest.raises(ValueError, match="Numbers.reset returned a int"):
        envs.reset(envs.take([None])[0], {"prompt": "p"})


ROWS = [{"prompt": [{"role": "user", "content": "Count."}], "start": 1}]


def _config(**overrides):
    return build_config({"model": "tiny-random", "data": ROWS, "reward_funcs": [], "environment_factory": Counter,
                         **overrides})


def test_environment_factory_from_python_yaml_and_the_command_line(tmp_path):
    from rlvr.config.parsing import parse_cli_value
    from rlvr.train.plan import environment_factories, tool_settings

    assert environment_factories(_config()) == {None: Counter}
    assert environment_factories(_config(environment_factory={"a": Counter, "b": Door})) == {"a": Counter, "b": Door}
    (tmp_path / "envs.py").write_text("class Lamp:\n    def reset(self, **row):\n        return None\n\n"
                                      "    def switch(self) -> str:\n        \"\"\"Switch.\"\"\"\n        return 'on'\n")
    spec = parse_cli_value("environment_factory", f"lamp={tmp_path}/envs.py:Lamp,door={tmp_path}/envs.py:Lamp")
    factories = environment_factories(_config(environment_factory=spec))
    assert sorted(factories) == ["door", "lamp"] and factories["lamp"].__name__ == "Lamp"
    yaml_dict = _config(environment_factory={"lamp": f"{tmp_path}/envs.py:Lamp"})  # (YAML's mapping form)
    assert environment_factories(yaml_dict)["lamp"].__name__ == "Lamp"
    settings = tool_settings(_config(tools=[shout]))
    assert settings.names == ("shout", "step") and not settings.builtin and settings.functions == (shout,)


@pytest.mark.parametrize("overrides, message", [
    ({"tools": ["python"]}, "cannot be mixed with; drop tools=python"),
    ({"async_generation": True, "rollout_engine": "vllm"}, "async_generation.*another step's"),
    ({"algo": "tagrpo", "num_rephrasings": 1}, "num_rephrasings.*use algo=grpo"),
    ({"algo": "dagrpo"}, "anchors.*use anchors=off"),
    ({"eval_data": ["gsm8k100"], "eval_strategy": "steps", "eval_steps": 1}, "eval_data.*no environment to reset"),
])
def test_what_environments_cannot_be_combined_with_is_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        _config(**overrides)


def test_no_reward_source_is_refused_and_reward_funcs_may_be_empty_only_with_an_environment():
    from rlvr.train.plan import tool_settings
    from rlvr.train.setup import rewarder_recipe

    with pytest.raises(ValueError, match="name at least one reward function"):
        build_config({"model": "tiny-random", "data": ROWS, "reward_funcs": []})
    cfg = _config(environment_factory=Door)
    rewarder = rewarder_recipe(cfg, tools=tool_settings(cfg)).build(max_steps=1, tokenizer=None)
    assert rewarder.names == ["Door"]
    rewarder.close()

    class Silent(Door):
        get_reward = None

    cfg = _config(environment_factory=Silent)
    with pytest.raises(ValueError, match="no reward source"):
        rewarder_recipe(cfg, tools=tool_settings(cfg)).build(max_steps=1, tokenizer=None)


def test_trls_trainer_without_a_dataset_plays_the_environment_for_max_steps():
    """TRL: with an environment that owns its data, train_dataset may be omitted (then max_steps is needed): one
    generation batch of empty user prompts."""
    from rlvr import GRPOConfig, GRPOTrainer

    args = GRPOConfig(output_dir="unused", max_steps=2, per_device_train_batch_size=4, num_generations=2)
    trainer = GRPOTrainer(model="tiny-random", args=args, environment_factory=Counter)
    assert trainer.train_dataset == [{"prompt": [{"role": "user", "content": ""}]}] * 2
    with pytest.raises(ValueError, match="max_steps must be set"):
        GRPOTrainer(model="tiny-random", args=GRPOConfig(output_dir="unused"), environment_factory=Counter)
    with pytest.raises(ValueError, match="needs a train_dataset with an 'environment' column"):
        GRPOTrainer(model="tiny-random", args=args, environment_factory={"a": Counter})


def test_instances_are_made_reset_called_and_scored_on_one_thread():
    """TRL does all of it on its main thread: an object bound to its thread (a sqlite connection) works anywhere."""
    import sqlite3
    import threading

    class Ledger:
        def __init__(self):
            self.db = sqlite3.connect(":memory:")
            self.threads = {threading.get_ident()}

        def reset(self, **row):
            self.db.execute("create table if not exists t (x)")
            self.threads.add(threading.get_ident())

        def add(self, x: int) -> int:
            """Add a row.

            Args:
                x: The value.
            """
            self.db.execute("insert into t values (?)", (x,))
            self.threads.add(threading.get_ident())
            return self.db.execute("select count(*) from t").fetchone()[0]

        def get_reward(self) -> float:
            self.threads.add(threading.get_ident())
            return float(self.db.execute("select sum(x) from t").fetchone()[0] or 0)

    envs = Environments({None: Ledger}, timeout=5)
    (ledger,) = envs.take([None])
    envs.reset(ledger, {"prompt": "p"})
    result = threading.Thread(target=lambda: ledger.__dict__.setdefault(
        "out", envs.runners(ledger)["add"]([ToolCall("add", {"x": 4})])))  # (the tool loop's own thread)
    result.start()
    result.join()
    assert ledger.out[0].text == "1" and not ledger.out[0].failed
    assert envs.reward_functions()[0](environments=[ledger]) == [4.0]
    assert len(ledger.threads) == 1 and threading.get_ident() not in ledger.threads


def test_reset_and_the_rewards_get_the_dataset_row_as_given():
    """TRL passes the row itself: no id or answer rlvr would add, the values as they were (an int stays an int), and
    a row with only an environment column has no prompt in it (the prompt defaults to an empty user message)."""
    from rlvr.data.sources import load_python_rows
    from rlvr.train.rewarding import reset_columns, reward_columns

    rows = load_python_rows([{"prompt": [{"role": "user", "content": "Go."}], "answer": 42, "start": 3},
                             {"environment": "lamp"}], gold=False, environment=True)
    assert reset_columns(rows[0]) == {"prompt": [{"role": "user", "content": "Go."}], "answer": 42, "start": 3}
    assert reward_columns(rows[0]) == {"answer": 42, "start": 3}
    assert reset_columns(rows[1]) == {"environment": "lamp"}
    assert rows[1]["prompt"] == [{"role": "user", "content": ""}]

    class Strict:
        def reset(self, prompt, answer, start):  # (no **kwargs: TRL's row fits it exactly)
            return f" {answer + start}"

    envs = Environments({None: Strict})
    assert envs.reset(envs.take([None])[0], reset_columns(rows[0])) == " 45"


def test_a_factory_that_fails_is_named_with_how_it_is_called():
    def few_tries(completions, environments):
        return []

    with pytest.raises(ValueError, match="'few_tries'.*failed to make an environment: TypeError.*called with no "
                                         "arguments"):
        Environments({None: few_tries})


def _tool_template_model(folder):
    """The tiny model with Qwen2.5's chat template as TRL ships it (tools, the tool role)."""
    trl_templates = pytest.importorskip("trl.chat_template_utils", reason="TRL ships Qwen2.5's tool template")
    from transformers import AutoTokenizer

    from tests.helpers.tiny_model import save_tiny_model

    folder = save_tiny_model(folder, max_positions=2048)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = trl_templates.qwen2_5_chat_template
    tokenizer.save_pretrained(folder)
    return folder


def test_trls_trainer_trains_without_a_dataset_when_the_environment_owns_the_prompt(tmp_path):
    from rlvr import GRPOConfig, GRPOTrainer

    class Maze:
        def reset(self, **row):
            assert row == {"prompt": [{"role": "user", "content": ""}]}  # (TRL's placeholder row)
            return "Find the exit."

        def north(self) -> str:
            """Go north."""
            return "a wall"

        def get_reward(self) -> float:
            return 0.5

    args = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=2,
                      num_generations=2, max_completion_length=8, report_to="none", save_strategy="no",
                      use_cpu=True)
    trainer = GRPOTrainer(model=str(_tool_template_model(tmp_path / "tiny")), args=args, environment_factory=Maze)
    trainer.train()
    assert [line["rewards/Maze/mean"] for line in trainer.state.log_history if "rewards/Maze/mean" in line] == [0.5]


def test_a_run_from_the_command_line_resets_each_rollout_and_rewards_it_from_its_environment(tmp_path, monkeypatch):
    """The whole path, as a user runs it: ``rlvr train environment_factory=envs.py:Counter`` with a chat model whose
    template lists tools. Each rollout's prompt carries its own observation (samples.jsonl), the class's reward is
    logged, and the update trained on those prompts (a random model calls no tool: the conformance test scripts
    the calls)."""
    from rlvr.cli import main

    folder = _tool_template_model(tmp_path / "tiny")
    (tmp_path / "envs.py").write_text(
        "import itertools\n_numbers = itertools.count()\n\n"
        "class Ticket:\n    def __init__(self):\n        self.number = next(_numbers)\n\n"
        "    def reset(self, **row):\n        self.row = row\n        return f' Ticket {self.number} for {row[\"who\"]}.'\n\n"
        "    def punch(self) -> str:\n        \"\"\"Punch the ticket.\"\"\"\n        return 'punched'\n\n"
        "    def get_reward(self) -> float:\n        return float(self.number % 2)\n")
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": f"Hello {w}."}], "who": w}) + "\n"
                            for w in ("Ada", "Bob")))
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    assert main(["train", f"model={folder}", f"data={data}", "environment_factory=envs.py:Ticket", "reward_funcs=",
                 "max_steps=1", "prompts_per_step=2", "num_generations=2", "max_completion_length=8",
                 "progress_bar=false", "num_completions_to_log=4", f"output_dir={run}"]) == 0
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    # the probe is ticket 0, then each rollout its own instance, reset with its own row
    observations = {s["observation"]: s["prompt"][0]["content"] for s in samples}
    assert sorted(o.split()[1] for o in observations) == ["0", "1", "2", "3"]
    assert all(o.endswith(f" for {prompt[6:-1]}.") for o, prompt in observations.items())
    (metrics,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert metrics["rewards/Ticket_mean"] == 0.5 and metrics["train/loss"] is not None
