"""The static decoding step against the model's own forward, and the properties a captured step needs:
no host synchronisation, one traced graph per shape, every tensor written in place."""

import contextlib
from typing import ClassVar

import pytest
import torch
from torch.overrides import TorchFunctionMode
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from rlvr.models import tiny_random_model_and_tokenizer
from rlvr.rollout import GREEDY, Sampling, decode_engine, static_decoder
from rlvr.rollout.decode_engine import DecodeEngine, DecodeState, DeviceSampler
from rlvr.rollout.kv_cache import CACHE_KWARG, make_cache

PROMPTS = [[7, 8, 9, 10, 11]] * 3 + [[12, 13]] * 3 + [[14, 15, 16]] * 2


def _qwen2_with_bias():
    """Qwen2 layout: q/k/v with bias, o without; GQA 4 heads over 2."""
    config = Qwen2Config(vocab_size=300, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=96, max_position_embeddings=256,
                         tie_word_embeddings=False, use_sliding_window=False)
    torch.manual_seed(3)
    model = Qwen2ForCausalLM(config).float().eval()
    with torch.no_grad():  # transformers zero-initialises biases: make them matter
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    return model


def _llama_scaled_rope():
    """Llama with a llama3 rope scaling (the rotary module's own code must be the one used) and MHA."""
    config = LlamaConfig(vocab_size=300, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=4, intermediate_size=80, max_position_embeddings=512,
                         rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 64})
    torch.manual_seed(4)
    return LlamaForCausalLM(config).float().eval()


MODELS = {"tiny-llama-gqa": lambda: tiny_random_model_and_tokenizer(seed=1)[0].eval(),
          "qwen2-bias": _qwen2_with_bias, "llama-rope-scaled-mha": _llama_scaled_rope}


def _prefilled(model, decoder, *, steps):
    """A left-padded batch of 4 prefilled twice: a transformers cache for the model's forward, and the
    decoder's static cache with its decoding state (capacity 7 + steps)."""
    torch.manual_seed(0)
    ids = torch.randint(3, 250, (4, 7))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding of different widths
    mask[3, :5] = 0
    reference, prefill = make_cache(model.config, 7 + steps), make_cache(model.config, 7)
    for cache in (reference, prefill):
        model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
              **{CACHE_KWARG: cache}, use_cache=True)
    cache = decoder.new_cache(4, 7 + steps, ids.device)
    cache.load_prefill(prefill.layers, torch.arange(4), 7)
    state = DecodeState.start(ids, mask, capacity=7 + steps, max_new_tokens=steps,
                              seed_words=decode_engine.split_seeds(range(4), "cpu"), eos_token_ids=[299],
                              pad_token_id=0)
    return mask, reference, cache, state


def _compare_with_forward(model, *, prepack, steps=6, exact=True):
    """Decode ``steps`` tokens both ways from the same prefill; the step's logits against the model's."""
    with torch.no_grad():
        decoder = static_decoder.StaticDecoder(model, prepack=prepack, batch_hint=3)  # the hint is only a hint
        mask, reference, cache, state = _prefilled(model, decoder, steps=steps)
        token = torch.randint(3, 250, (4,))
        for _ in range(steps):
            state.record(token, torch.zeros(4))  # the token the next step feeds, at the next position and slot
            mask = torch.cat([mask, mask.new_ones((4, 1))], dim=1)
            plain = model(input_ids=token[:, None], attention_mask=mask, position_ids=state.position[:, None],
                          **{CACHE_KWARG: reference}, use_cache=True).logits[:, -1, :]
            state.feed()
            static = decoder.forward(state.ids, state.position, state.slot, state.attend[:, :mask.shape[1]], cache)
            assert static.dtype == plain.dtype
            if exact:
                assert torch.equal(static, plain), (static - plain).abs().max()
            else:
                torch.testing.assert_close(static, plain, rtol=1e-5, atol=1e-5)
            token = plain.argmax(-1)
    return decoder, cache


@pytest.mark.parametrize("name", list(MODELS))
def test_static_step_equals_model_forward_bit_for_bit_in_fp32(name):
    """Same kernels as the model's forward (stacked q/k/v, the packed-GQA attention transformers runs for one
    query token): the logits are the model's, exactly, over 6 cached steps with left padding."""
    model = MODELS[name]()
    assert static_decoder.supports(model)
    _compare_with_forward(model, prepack=False)


@pytest.mark.parametrize("name", list(MODELS))
def test_prepacked_step_equals_model_forward(name):
    """CPU float32 default: oneDNN's products on prepacked weights round differently from MKL's (~1e-7)."""
    model = MODELS[name]()
    decoder, _ = _compare_with_forward(model, prepack=True, exact=False)
    if static_decoder.can_prepack(model.lm_head.weight):
        assert decoder.head.packed is not None, "this CPU build should prepack: the test would not cover it"


@pytest.mark.parametrize("name", list(MODELS))
def test_under_autocast_the_step_reads_bf16_weights_cast_once_and_equals_the_autocast_forward(name):
    """bf16=true generates under autocast: the step's products read bf16 copies made once (no fp32 weight is
    cast per position), its cache holds keys and values in bf16, and its logits are the model's forward
    under the same autocast, bit for bit."""
    model = MODELS[name]()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        decoder, cache = _compare_with_forward(model, prepack=True)
    assert decoder.dtype == torch.bfloat16
    projections = [*decoder.layers[0].values(), decoder.head]
    assert all(p.weight.dtype == torch.bfloat16 and p.packed is None for p in projections)
    assert all(k.dtype == v.dtype == torch.bfloat16 for k, v in cache.layers)
    assert model.lm_head.weight.dtype == torch.float32  # the master weights are untouched


def _engine(model, fused, eos=(299,), **kwargs):
    return DecodeEngine(model, pad_token_id=0, eos_token_ids=list(eos), fused=fused, **kwargs)


@pytest.mark.parametrize("name", list(MODELS))
def test_engine_static_equals_model_forward_sampling_and_greedy(name, monkeypatch):
    model = MODELS[name]()
    steps = []
    monkeypatch.setattr(static_decoder, "decode_step",
                        lambda *a, _original=static_decoder.decode_step: steps.append(1) or _original(*a))
    for sampling in (GREEDY, Sampling(1.0), Sampling(0.7, top_p=0.9)):
        a = _engine(model, True).generate(PROMPTS, max_new_tokens=10, sampling=sampling, generator_seed=5)
        b = _engine(model, False).generate(PROMPTS, max_new_tokens=10, sampling=sampling, generator_seed=5)
        assert [c.token_ids for c in a] == [c.token_ids for c in b]
        for x, y in zip(a, b):
            torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), rtol=1e-5, atol=1e-5)
    assert len(steps) >= 3 * 9, "the engine must decode through the static step"


def test_fused_decoding_option_reaches_the_engine():
    from rlvr.config import load_config
    from rlvr.train.plan import engine_plan
    from rlvr.train.setup import engine_spec

    def _spec(cfg, *, is_main):
        return engine_spec(cfg, engine_plan(cfg), is_main=is_main)

    assert _spec(load_config(None, []), is_main=True) == ("rlvr", {"max_batch_size": 64, "fused": True})
    off = load_config(None, ["fused_decoding=false"])
    assert _spec(off, is_main=True)[1]["fused"] is False


def test_weights_changed_between_calls_are_used():
    """The cast/stacked weights are re-taken per call: an optimiser step in between is seen."""
    model = MODELS["tiny-llama-gqa"]()
    fused, plain = _engine(model, True), _engine(model, False)
    sampling = Sampling(1.0)
    before = fused.generate(PROMPTS, max_new_tokens=8, sampling=sampling, generator_seed=1)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.k_proj.weight.mul_(-3.0)
            layer.mlp.up_proj.weight.add_(0.2)
    after = fused.generate(PROMPTS, max_new_tokens=8, sampling=sampling, generator_seed=1)
    reference = plain.generate(PROMPTS, max_new_tokens=8, sampling=sampling, generator_seed=1)
    assert [c.token_ids for c in after] == [c.token_ids for c in reference]
    for x, y in zip(after, reference):
        torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), rtol=1e-5, atol=1e-5)
    changed = [c.logprobs[1:] != b.logprobs[1:] for c, b in zip(after, before)]  # step 0 is the prefill's
    assert all(changed), "the perturbation must change every row's decoding-step log-probs"


def test_kept_buffers_take_new_weights_in_place():
    """Under bf16 autocast the stacked and cast weights live in buffers a recorded graph reads: a refresh
    writes the new weights into the same memory."""
    model = MODELS["qwen2-bias"]()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        decoder = static_decoder.StaticDecoder(model)
        qkv, head = decoder.layers[1]["qkv"], decoder.head
        addresses = decoder.inputs()
        with torch.no_grad():
            model.model.layers[1].self_attn.v_proj.weight.add_(1.0)
            model.model.layers[1].self_attn.k_proj.bias.add_(1.0)
            model.lm_head.weight.mul_(2.0)
        decoder.refresh()
    assert decoder.inputs() == addresses
    attn = model.model.layers[1].self_attn
    expected = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]).bfloat16()
    assert torch.equal(qkv.weight, expected)
    assert torch.equal(qkv.bias, torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]).bfloat16())
    assert torch.equal(head.weight, model.lm_head.weight.bfloat16())


def test_supports_only_plain_full_attention_llama_family():
    model = MODELS["tiny-llama-gqa"]()
    assert static_decoder.supports(model)
    import peft  # a dependency of rlvr
    lora = peft.get_peft_model(tiny_random_model_and_tokenizer(seed=1)[0],
                               peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    assert not static_decoder.supports(lora)  # a PeftModel: no lm_head/model layout at the top
    assert not static_decoder.supports(lora.base_model.model)  # LoRA layers instead of nn.Linear
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50))
    assert not static_decoder.supports(gpt2)
    sliding = Qwen2Config(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                          num_key_value_heads=1, intermediate_size=64, use_sliding_window=True, sliding_window=8,
                          max_window_layers=0)
    assert not static_decoder.supports(Qwen2ForCausalLM(sliding))  # its cache is not one buffer per layer
    dynamic = LlamaConfig(vocab_size=300, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                          intermediate_size=64, rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                                                 "rope_theta": 10000.0})
    assert not static_decoder.supports(LlamaForCausalLM(dynamic))  # frequencies depend on the positions seen


@pytest.mark.parametrize("bucket", [4, 16, 64])
def test_attention_length_buckets_change_nothing_but_shapes(bucket, monkeypatch):
    """kv_bucket > 1 (CUDA's default) attends over masked slots past the filled ones: same samples, same
    log-probs as exact lengths and as the model's forward; the attention's key lengths are multiples of the
    bucket (or the cache's capacity)."""
    model = MODELS["qwen2-bias"]()
    lengths, decoding = [], []
    sdpa, step = static_decoder.F.scaled_dot_product_attention, static_decoder.decode_step
    monkeypatch.setattr(static_decoder.F, "scaled_dot_product_attention",  # (torch's own: the prefill's too)
                        lambda q, k, v, **kw: (decoding and lengths.append(k.shape[2])) or sdpa(q, k, v, **kw))
    monkeypatch.setattr(static_decoder, "decode_step",
                        lambda *a: decoding.append(1) or step(*a) or decoding.clear())
    sampling = Sampling(1.0)
    bucketed = _engine(model, True, kv_bucket=bucket).generate(PROMPTS, max_new_tokens=12, sampling=sampling,
                                                               generator_seed=2)
    capacity = 5 + 12  # widest prompt + new tokens
    assert len(lengths) >= 11 * 2, "the decoding steps' attention (2 layers) must have been seen"
    assert all(n % bucket == 0 or n == capacity for n in lengths)
    assert len(set(lengths)) <= -(-capacity // bucket)
    for other in (_engine(model, True, kv_bucket=1), _engine(model, False)):
        exact = other.generate(PROMPTS, max_new_tokens=12, sampling=sampling, generator_seed=2)
        assert [c.token_ids for c in bucketed] == [c.token_ids for c in exact]
        for x, y in zip(bucketed, exact):
            torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), rtol=1e-5, atol=1e-5)


def test_buckets_default_to_128_on_cuda_only():
    assert static_decoder.kv_bucket_for(torch.device("cuda", 0)) == 128
    assert static_decoder.kv_bucket_for("cpu") == 1


# ---------------------------------------------------------------- what capturing the step needs

class _NoHostSync(TorchFunctionMode):
    """Raises on every operation that brings a tensor's value to the host (on CUDA: a synchronisation, and
    an error while a graph records): .item(), .tolist(), .cpu(), .numpy(), bool(t), int(t), float(t),
    .nonzero(), unique, masked_select (data-dependent shapes), and torch.equal/allclose (a Python bool).
    Not caught here: ``.to(device)`` to the host, which on a CPU-only machine cannot be told from a no-op
    (on CUDA, recording the graph fails on it)."""

    FORBIDDEN: ClassVar[set] = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.cpu, torch.Tensor.numpy, torch.Tensor.__bool__,
                 torch.Tensor.__int__, torch.Tensor.__float__, torch.Tensor.__index__, torch.Tensor.nonzero,
                 torch.nonzero, torch.equal, torch.allclose, torch.Tensor.unique, torch.unique,
                 torch.Tensor.masked_select, torch.masked_select}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.FORBIDDEN:
            raise AssertionError(f"host synchronisation inside the decoding step: {getattr(func, '__name__', func)}")
        return func(*args, **(kwargs or {}))


def _step_parts(model, sampling, *, batch=4, steps=8):
    with torch.no_grad():
        decoder = static_decoder.StaticDecoder(model, prepack=False)
        _, _, cache, state = _prefilled(model, decoder, steps=steps)
        state.record(torch.tensor([20, 21, 22, 23]), torch.zeros(4))  # the draw from the prefill, as the engine does
    return decoder, DeviceSampler(sampling, "cpu"), state, cache


WARPED = Sampling(0.7, top_k=10, top_p=0.9, min_p=0.05, repetition_penalty=1.3)


@pytest.mark.parametrize("sampling", [Sampling(1.0), WARPED, GREEDY], ids=["T1", "all-warps", "greedy"])
def test_the_step_never_waits_for_the_host(sampling):
    """Every operation of a step (forward, warps, draw, bookkeeping) stays on the device."""
    model = MODELS["qwen2-bias"]()
    decoder, sampler, state, cache = _step_parts(model, sampling)
    assert _NoHostSync.FORBIDDEN  # the mode itself is checked to fire:
    with pytest.raises(AssertionError, match="host synchronisation"), _NoHostSync():
        bool(state.done.all())
    with torch.no_grad(), _NoHostSync():
        for t in range(4):
            static_decoder.decode_step(decoder, sampler, state, cache, 8 + t)
    assert int(state.step) == 1 + 4 and int(state.slot) == 6 + 1 + 4


def test_every_tensor_the_step_writes_keeps_its_address():
    """A recorded graph replays on the addresses it saw: the step writes its state and cache in place and
    replaces no tensor of them (a `state.ids = chosen` instead of `copy_` would fail this)."""
    model = MODELS["tiny-llama-gqa"]()
    decoder, sampler, state, cache = _step_parts(model, WARPED)
    before = {name: (id(t), t.data_ptr()) for name, t in vars(state).items() if isinstance(t, torch.Tensor)}
    cache_before = [(k.data_ptr(), v.data_ptr()) for k, v in cache.layers]
    snapshot = {name: t.clone() for name, t in vars(state).items() if isinstance(t, torch.Tensor)}
    with torch.no_grad():
        static_decoder.decode_step(decoder, sampler, state, cache, 8)
    after = {name: (id(t), t.data_ptr()) for name, t in vars(state).items() if isinstance(t, torch.Tensor)}
    assert after == before and [(k.data_ptr(), v.data_ptr()) for k, v in cache.layers] == cache_before
    changed = {name for name, t in vars(state).items() if isinstance(t, torch.Tensor) and not torch.equal(t, snapshot[name])}
    assert {"ids", "position", "slot", "step", "attend", "tokens", "logprobs", "lengths", "history"} <= changed


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_the_step_compiles_whole_with_one_graph_per_shape(backend):
    """torch.compile(fullgraph=True) traces the whole step (a graph break raises) and compiles once per
    attention length, never per position; the compiled steps decode what the eager ones do. ``aot_eager``
    also runs AOTAutograd's functionalisation of the in-place writes (what inductor compiles)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    model = MODELS["tiny-llama-gqa"]()
    counter = CompileCounterWithBackend(backend)
    torch._dynamo.reset()
    compiled = torch.compile(static_decoder.decode_step, backend=counter, fullgraph=True, dynamic=False)
    parts = [_step_parts(model, WARPED, steps=8) for _ in range(2)]
    with torch.no_grad():
        for t in range(7):
            seen = 15 if t < 4 else 16  # two shapes: the capacity bucketed two ways
            compiled(*parts[0], seen)
            static_decoder.decode_step(*parts[1], seen)
    torch._dynamo.reset()
    assert counter.frame_count == 2, f"{counter.frame_count} compiles for 2 attention lengths over 7 positions"
    (_, _, compiled_state, _), (_, _, eager_state, _) = parts
    assert torch.equal(compiled_state.tokens, eager_state.tokens)
    torch.testing.assert_close(compiled_state.logprobs, eager_state.logprobs, rtol=1e-5, atol=1e-6)


def test_graph_modes_need_cuda_and_a_fixed_batch():
    model = MODELS["tiny-llama-gqa"]()
    with pytest.raises(ValueError, match="CUDA device"):
        _engine(model, True, capture="graph", compact_below=0).generate(PROMPTS, max_new_tokens=3, sampling=GREEDY)
    with pytest.raises(ValueError, match="compact_below"):
        _engine(model, True, capture="graph", compact_below=1.0).generate(PROMPTS, max_new_tokens=3, sampling=GREEDY)
    with pytest.raises(ValueError, match="capture="):
        _engine(model, True, capture="cudagraph")


@pytest.mark.parametrize("sync_every", [1, 3, 16])
def test_reading_the_flags_back_less_often_changes_no_response(sync_every):
    """Rows ending between two read-backs keep decoding, ignored: the responses do not depend on when the
    host looks."""
    eos = list(range(100, 130))  # ~1 in 9 sampled tokens ends a row
    model = MODELS["tiny-llama-gqa"]()
    reference = _engine(model, True, eos=eos).generate(PROMPTS, max_new_tokens=12, sampling=WARPED, generator_seed=3)
    fixed = _engine(model, True, eos=eos, compact_below=0, sync_every=sync_every).generate(
        PROMPTS, max_new_tokens=12, sampling=WARPED, generator_seed=3)
    assert [(c.token_ids, c.logprobs, c.truncated) for c in fixed] == \
        [(c.token_ids, c.logprobs, c.truncated) for c in reference]
    assert len({len(c.token_ids) for c in reference}) > 1


# ---------------------------------------------------------------- the step kept across calls

@pytest.fixture
def traced_only(monkeypatch):
    """The compiled modes traced by dynamo but run without inductor's code generation (seconds, not minutes):
    what is tested here is which tensors and graphs the engine keeps across calls."""
    monkeypatch.setattr(static_decoder, "COMPILE_BACKEND", "eager")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _kept(model, **kwargs):
    return _engine(model, True, capture="compile", compact_below=0, kv_bucket=8, **kwargs)


def test_a_kept_step_serves_later_calls_and_sees_every_update(traced_only):
    """Two calls of one shape share the state, cache and runner (a recorded graph would replay); an in-place
    weight change (an optimiser step) is seen by the next call; a shorter prompt fits the kept capacity; a
    parameter replaced by a new tensor (another address) makes a new workspace. Every call samples what the
    model's own forward samples."""
    model = MODELS["qwen2-bias"]()
    kept, plain = _kept(model), _engine(model, False)
    sampling = Sampling(0.9, top_p=0.95)

    def both(prompts):
        a = kept.generate(prompts, max_new_tokens=10, sampling=sampling, generator_seed=3)
        b = plain.generate(prompts, max_new_tokens=10, sampling=sampling, generator_seed=3)
        assert [c.token_ids for c in a] == [c.token_ids for c in b]
        return kept._workspaces[len(prompts)]

    first = both(PROMPTS)
    runner = first.steppers[sampling].runner
    assert both(PROMPTS) is first and first.steppers[sampling].runner is runner  # kept, not rebuilt
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight.mul_(1.5)  # in place, as AdamW updates
        model.model.layers[1].self_attn.k_proj.bias.add_(0.3)
    assert both(PROMPTS) is first
    assert both([p[-2:] for p in PROMPTS]) is first  # narrower prompts: the kept capacity serves
    with torch.no_grad():
        layer = model.model.layers[1].mlp
        layer.down_proj.weight = torch.nn.Parameter(layer.down_proj.weight * 0.5)  # a new tensor: new address
    assert both(PROMPTS) is not first


def test_kept_steps_per_sampling_and_batch_size(traced_only):
    model = MODELS["tiny-llama-gqa"]()
    kept = _kept(model)
    greedy_first = kept.generate(PROMPTS, max_new_tokens=6, sampling=GREEDY)
    kept.generate(PROMPTS, max_new_tokens=6, sampling=Sampling(1.0), generator_seed=1)
    kept.generate(PROMPTS[:3], max_new_tokens=6, sampling=GREEDY)
    assert set(kept._workspaces) == {len(PROMPTS), 3}
    assert set(kept._workspaces[len(PROMPTS)].steppers) == {GREEDY, Sampling(1.0)}
    again = kept.generate(PROMPTS, max_new_tokens=6, sampling=GREEDY)  # the greedy stepper again, state reloaded
    assert [c.token_ids for c in again] == [c.token_ids for c in greedy_first]
    kept.eos_token_ids = [299, 298]  # the trainer may change the stop ids (gpu_check does): a new workspace
    kept.generate(PROMPTS, max_new_tokens=6, sampling=GREEDY)
    assert kept._workspaces[len(PROMPTS)].state.eos.tolist() == [299, 298]


def test_recorded_and_compiled_modes_refuse_compaction():
    model = MODELS["tiny-llama-gqa"]()
    with pytest.raises(ValueError, match="kept for one batch size"):
        _engine(model, True, capture="compile", compact_below=0.5).generate(PROMPTS, max_new_tokens=3, sampling=GREEDY)


def test_a_failed_recording_costs_speed_not_the_rollout(monkeypatch, caplog):
    """On a GPU, recording can fail on something no CPU test sees (a host sync, an uncapturable kernel). The
    runner then warns once, runs the step the recording did not, and stays eager: the same draws as an eager
    runner. (CUDA's streams and graphs are stand-ins here: the recording raises as CUDA does.)"""

    class Stream:
        def wait_stream(self, _other):
            pass

    class FailingRecording:
        def __init__(self, *_args, **_kwargs):
            pass

        def __enter__(self):
            raise RuntimeError("operation not permitted when stream is capturing")

        def __exit__(self, *_exc):
            return False

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", Stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda _stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", object)
    monkeypatch.setattr(torch.cuda, "graph", FailingRecording)
    model = MODELS["tiny-llama-gqa"]()
    recorded, eager = _step_parts(model, WARPED), _step_parts(model, WARPED)
    runner = static_decoder.StepRunner(*recorded, mode="graph")
    with torch.no_grad(), caplog.at_level("WARNING", logger="rlvr.rollout.static_decoder"):
        for seen in (15, 15, 15, 16):  # warm-up (run), recording (fails: run), then eager
            runner(seen)
            static_decoder.decode_step(*eager, seen)
    assert runner.mode == "eager" and runner.captures == 0
    warnings = [r.message for r in caplog.records if r.name == "rlvr.rollout.static_decoder"]
    assert len(warnings) == 1 and "recording it as a CUDA graph failed" in warnings[0]
    assert torch.equal(recorded[2].tokens, eager[2].tokens) and int(recorded[2].step) == 5


def test_kept_buffers_that_would_take_a_large_share_of_the_device_are_made_per_call(traced_only, monkeypatch):
    """A 7B policy's cast weights and caches would hold ~20 % of an 80 GB GPU through the update: past
    KEEP_FRACTION the engine drops them after each call (as the eager mode does), with the same responses."""
    from rlvr.rollout import decode_engine as engine_module

    model = MODELS["qwen2-bias"]()
    kept = _kept(model)
    first = kept.generate(PROMPTS, max_new_tokens=6, sampling=GREEDY)
    assert kept._workspaces and kept._kept_bytes() > 0  # the default share keeps them (a tiny model)
    monkeypatch.setattr(engine_module, "KEEP_FRACTION", 0.0)
    again = kept.generate(PROMPTS, max_new_tokens=6, sampling=GREEDY)
    assert not kept._workspaces and kept._decoder is None
    assert [c.token_ids for c in again] == [c.token_ids for c in first]
