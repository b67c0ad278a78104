#!/usr/bin/env python3
"""PyTorch baselines and the matrix-rate ceiling for flashsample-bench.

Spawned by bench/cli.ts (dist/bench/cli.js); can be run by hand too:

    python3 bench/baselines/torch_baselines.py \
        --shapes '[{"name": "llama3-8b", "vocab": 128256, "hidden": 4096}]' \
        --batches 1,2,4,8,16,32,64,128,256 --dtype bf16 --iters 100 --warmup 10

With `--option-sets '[{"label": "llama3", "temperature": 0.6, "top_p": 0.9}, ...]'` it also times,
per option set, the materializing pipeline with the same filters (matmul, then softcap, mask,
temperature, top-k, top-p, min-p, logprobs / top logprobs as given, then torch.multinomial); its
results are under each row's "options", keyed by label. `--logits model` builds H and W the way the
bench's model-like mode does (bench/logits.ts: the same topic plan from the same seed, the bulk
from torch.randn instead of uniform values); `--print-logits-plan` prints that plan for the first
shape and exits (no torch needed: test/bench-inputs.test.ts compares it with the bench's).

Prints exactly one JSON object on stdout (progress and diagnostics go to stderr). Without PyTorch,
or with a PyTorch that has no CUDA, the object says {"available": false, "reason": "..."} and the
exit code is 0: that is an answer, not a failure. Argument errors exit with code 2 (argparse).
Each baseline is timed in its own try block; an exception becomes {"error": "..."} in its cell.

Timing: torch.cuda.Event pairs around every call, after `warmup` untimed calls; the weights are
rotated over enough distinct copies that they cannot all sit in L2 (total > 2 x 60 MB, at least
two copies); median and p10/p90 over `iters` calls. Logits are computed in the weight dtype by
cuBLAS (as a serving stack would) and cast to float32 before softmax / noise.
"""

import argparse
import json
import math
import os
import platform
import sys
import time
import traceback

L2_BYTES_DEFAULT = 60 * 1000 * 1000
DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4}

# id -> description, in table order. topk / topp take their parameter from --top-k / --top-p.
BASELINES = {
    "matmul": "cuBLAS H @ W.T alone",
    "multinomial": "matmul + softmax + torch.multinomial",
    "gumbel": "matmul + Gumbel noise (-log(-log u)) + argmax",
    "exp-race": "matmul + softmax + probs / q.exponential_() argmax (vLLM)",
    "topk": "matmul + top-k + softmax + multinomial",
    "topp": "matmul + sort + top-p (cumsum) + softmax + multinomial",
}
DEFAULT_BASELINES = ["matmul", "multinomial", "gumbel", "exp-race"]

# Keys an --option-sets entry may have (the bench's OptionSet, in snake_case), with their checks.
OPTION_KEYS = {
    "temperature": lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < 1e30,
    "top_k": lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= 1,
    "top_p": lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x <= 1,
    "min_p": lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < 1,
    "logprobs": lambda x: isinstance(x, bool),
    "top_logprobs": lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= 1,
    "softcap": lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0,
    "mask": lambda x: isinstance(x, bool),
    "filter_order": lambda x: x in ("hf", "vllm"),
    "num_samples": lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= 1,
}

# The model-like logits mode; the same constants as MODEL_LOGITS in bench/logits.ts.
MODEL_BULK_STD = 2.0
MODEL_FLAT_BULK_SCALE = 0.5
MODEL_FLAT_EVERY = 20
MODEL_HOT_MIN = 12.0
MODEL_TOP_MIN = 17.0
MODEL_HOT_MAX = 20.0
MODEL_HOT_LOG2 = 6
MODEL_MAX_TOPICS = 256
MODEL_SEED = 7
MODEL_MAX_HOT_PER_TOPIC = 2 ** MODEL_HOT_LOG2 - 1


def mulberry32(seed):
    """bench/inputs.ts's generator, bit for bit: floats in [0, 1)."""
    state = [seed & 0xFFFFFFFF]

    def imul(a, b):
        return (a * b) & 0xFFFFFFFF

    def rand():
        state[0] = (state[0] + 0x6D2B79F5) & 0xFFFFFFFF
        t = state[0]
        t = imul(t ^ (t >> 15), t | 1)
        t ^= (t + imul(t ^ (t >> 7), t | 61)) & 0xFFFFFFFF
        return ((t ^ (t >> 14)) & 0xFFFFFFFF) / 4294967296.0

    return rand


def model_logits_unsupported(vocab, hidden):
    if hidden < 2:
        return "--logits model needs a hidden size D >= 2, got %d" % hidden
    if vocab < 2 * (MODEL_MAX_HOT_PER_TOPIC + 1):
        return "--logits model needs a vocabulary V >= %d, got %d" % (2 * (MODEL_MAX_HOT_PER_TOPIC + 1), vocab)
    return None


def model_logits_plan(vocab, hidden, seed=MODEL_SEED):
    """The topic plan of bench/logits.ts modelLogitsPlan: the same tokens and offsets for a seed."""
    why = model_logits_unsupported(vocab, hidden)
    if why:
        raise ValueError(why)
    topics = max(1, min(MODEL_MAX_TOPICS, hidden // 2, vocab // (2 * (MODEL_MAX_HOT_PER_TOPIC + 1))))
    rand = mulberry32(seed)
    used = set()
    hot = []
    for _ in range(topics):
        span = 2 ** int(math.floor(rand() * MODEL_HOT_LOG2))
        n = span + int(math.floor(rand() * span))
        top = MODEL_TOP_MIN + (MODEL_HOT_MAX - MODEL_TOP_MIN) * rand()
        tokens, offsets = [], []
        for i in range(n):
            while True:
                v = int(math.floor(rand() * vocab))
                if v not in used:
                    break
            used.add(v)
            tokens.append(v)
            r = rand()
            offsets.append(top if i == 0 else top - (top - MODEL_HOT_MIN) * r * r)
        hot.append({"tokens": tokens, "offsets": offsets})
    return {"vocab": vocab, "hidden": hidden, "topics": topics, "bulkDims": hidden - topics, "hot": hot}


def model_row_topic(plan, row):
    """The topic of row b, or None for a flat row (every MODEL_FLAT_EVERY-th)."""
    if row % MODEL_FLAT_EVERY == MODEL_FLAT_EVERY - 1:
        return None
    return row % plan["topics"]


def log(msg):
    sys.stderr.write("[torch_baselines] " + msg + "\n")
    sys.stderr.flush()


def finite(obj):
    """JSON has no NaN or Infinity: they become null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def emit(obj):
    sys.stdout.write(json.dumps(finite(obj), allow_nan=False, default=str) + "\n")
    sys.stdout.flush()


def short_error(exc):
    text = "%s: %s" % (type(exc).__name__, str(exc).strip())
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:300]


def parse_shapes(text):
    try:
        shapes = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError("expected a JSON list of {name, vocab, hidden}, got %r (%s)" % (text, exc))
    if not isinstance(shapes, list) or not shapes:
        raise argparse.ArgumentTypeError("expected a non-empty JSON list of {name, vocab, hidden}, got %r" % (text,))
    out = []
    for i, s in enumerate(shapes):
        if not isinstance(s, dict):
            raise argparse.ArgumentTypeError("shape %d: expected an object {name, vocab, hidden}, got %r" % (i, s))
        v, d = s.get("vocab"), s.get("hidden")
        for key, val in (("vocab", v), ("hidden", d)):
            if not isinstance(val, int) or isinstance(val, bool) or val < 1:
                raise argparse.ArgumentTypeError("shape %d: %s: expected an integer >= 1, got %r" % (i, key, val))
        name = s.get("name", "%dx%d" % (v, d))
        if not isinstance(name, str):
            raise argparse.ArgumentTypeError("shape %d: name: expected a string, got %r" % (i, name))
        out.append({"name": name, "vocab": v, "hidden": d})
    return out


def parse_int_list(text):
    try:
        items = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("expected a comma-separated list of integers, got %r" % (text,))
    if not items or any(x < 1 or x > 65535 for x in items):
        raise argparse.ArgumentTypeError("expected integers from 1 to 65535, got %r" % (text,))
    return sorted(set(items))


def parse_baselines(text):
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in BASELINES]
    if bad:
        raise argparse.ArgumentTypeError("unknown baseline(s) %s; expected some of %s" % (", ".join(bad), ",".join(BASELINES)))
    return items


def positive_int(text):
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected an integer, got %r" % (text,))
    if n < 1:
        raise argparse.ArgumentTypeError("expected an integer >= 1, got %r" % (text,))
    return n


def nonneg_int(text):
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected an integer, got %r" % (text,))
    if n < 0:
        raise argparse.ArgumentTypeError("expected an integer >= 0, got %r" % (text,))
    return n


def positive_float(text):
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a number, got %r" % (text,))
    if not (x > 0 and math.isfinite(x)):
        raise argparse.ArgumentTypeError("expected a finite number > 0, got %r" % (text,))
    return x


def parse_option_sets(text):
    try:
        sets = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError("expected a JSON list of option sets, got %r (%s)" % (text, exc))
    if not isinstance(sets, list):
        raise argparse.ArgumentTypeError("expected a JSON list of option sets, got %r" % (text,))
    labels = set()
    for i, o in enumerate(sets):
        if not isinstance(o, dict) or not isinstance(o.get("label"), str) or not o["label"]:
            raise argparse.ArgumentTypeError("option set %d: expected an object with a non-empty label, got %r" % (i, o))
        if o["label"] in labels:
            raise argparse.ArgumentTypeError("option set %d: label %r is listed twice" % (i, o["label"]))
        labels.add(o["label"])
        for key, val in o.items():
            if key == "label":
                continue
            if key not in OPTION_KEYS:
                raise argparse.ArgumentTypeError("option set %r: unknown key %r; expected some of label, %s"
                                                 % (o["label"], key, ", ".join(OPTION_KEYS)))
            if not OPTION_KEYS[key](val):
                raise argparse.ArgumentTypeError("option set %r: bad value %r for %s" % (o["label"], val, key))
    return sets


def describe_option_set(o):
    steps = ["matmul"]
    if o.get("softcap"):
        steps.append("softcap %g" % o["softcap"])
    if o.get("mask"):
        steps.append("masked_fill (half the tokens)")
    t = o.get("temperature", 1.0)
    if t == 0:
        return " + ".join(steps + ["argmax (T 0)"])
    if t != 1:
        steps.append("/ T %g" % t)
    min_p_first = o.get("filter_order") == "vllm" and bool(o.get("min_p"))
    if min_p_first:
        steps.append("min-p %g first (softmax, mask p < min_p * pmax)" % o["min_p"])
    if o.get("top_k") is not None:
        steps.append("topk %d" % o["top_k"])
    if o.get("top_p") is not None and o["top_p"] < 1:
        steps.append(("" if o.get("top_k") is not None else "sort + ") + "top-p %g (softmax, cumsum)" % o["top_p"])
    if o.get("min_p") and not min_p_first:
        steps.append("min-p %g (softmax, mask p < min_p * pmax, renormalize)" % o["min_p"])
        if o.get("logprobs") or o.get("top_logprobs"):
            steps.append("log")
    elif o.get("logprobs") or o.get("top_logprobs"):
        steps.append("log_softmax")
    else:
        steps.append("softmax")
    steps.append("multinomial")
    if o.get("top_logprobs"):
        steps.append("topk %d logprobs" % o["top_logprobs"])
    if o.get("logprobs"):
        steps.append("gather logprob")
    return " + ".join(steps)


def option_pipeline(torch, o, logits_of):
    """matmul + the option set's filters, in docs/SEMANTICS.md's order (filter_order 'vllm': min-p
    first, as vLLM), + multinomial: fn(h, w, allowed)."""
    t = float(o.get("temperature", 1.0))
    top_k, top_p, min_p = o.get("top_k"), o.get("top_p"), o.get("min_p") or 0.0
    min_p_first = o.get("filter_order") == "vllm" and min_p > 0
    want_lp, n_top, cap = bool(o.get("logprobs")), o.get("top_logprobs"), o.get("softcap")
    n_samples = int(o.get("num_samples", 1))

    def fn(h, w, allowed):
        x = logits_of(h, w)
        if cap:
            x = torch.tanh(x / cap) * cap
        if allowed is not None:
            x = x.masked_fill(~allowed, float("-inf"))
        if t == 0:
            return torch.argmax(x, dim=-1, keepdim=True).expand(-1, n_samples)
        if t != 1:
            x = x / t
        if min_p_first:
            probs = torch.softmax(x, dim=-1)
            x = x.masked_fill(probs < min_p * probs.amax(dim=-1, keepdim=True), float("-inf"))
        idx = None
        if top_k is not None and top_k < x.shape[-1]:
            x, idx = torch.topk(x, top_k, dim=-1)  # sorted, descending
        if top_p is not None and top_p < 1:
            if idx is None:
                x, idx = torch.sort(x, descending=True, dim=-1)
            probs = torch.softmax(x, dim=-1)
            x = x.masked_fill((probs.cumsum(dim=-1) - probs) > top_p, float("-inf"))
        lp = None
        if min_p > 0 and not min_p_first:
            probs = torch.softmax(x, dim=-1)
            probs = probs.masked_fill(probs < min_p * probs.amax(dim=-1, keepdim=True), 0.0)
            probs = probs / probs.sum(dim=-1, keepdim=True)
            if want_lp or n_top:
                lp = torch.log(probs)
        elif want_lp or n_top:
            lp = torch.log_softmax(x, dim=-1)
            probs = lp.exp()
        else:
            probs = torch.softmax(x, dim=-1)
        s = torch.multinomial(probs, n_samples, replacement=True)
        tokens = s if idx is None else idx.gather(-1, s)
        if n_top:
            top_lp, top_idx = torch.topk(lp, min(n_top, lp.shape[-1]), dim=-1)
            fn.last_top = (top_lp, top_idx if idx is None else idx.gather(-1, top_idx))
        if want_lp:
            fn.last_logprobs = lp.gather(-1, s)
        return tokens

    return fn


def make_weights(torch, args, V, D, copies, dev, gen, torch_dtype):
    """Copies of W in the run's logits mode, and the model-like plan (None in the gaussian mode)."""
    if args.logits == "model":
        plan = model_logits_plan(V, D, args.logits_seed)
        K = plan["topics"]
        tokens = [v for topic in plan["hot"] for v in topic["tokens"]]
        cols = [c for c, topic in enumerate(plan["hot"]) for _ in topic["tokens"]]
        offsets = [x for topic in plan["hot"] for x in topic["offsets"]]
        t_idx = torch.tensor(tokens, device=dev, dtype=torch.long)
        c_idx = torch.tensor(cols, device=dev, dtype=torch.long)
        vals = torch.tensor(offsets, device=dev, dtype=torch.float32)
        out = []
        for _ in range(copies):
            w = torch.randn(V, D, device=dev, dtype=torch.float32, generator=gen)
            w *= MODEL_BULK_STD / math.sqrt(plan["bulkDims"])
            w[:, :K] = 0
            w[t_idx] = 0
            w[t_idx, c_idx] = vals
            out.append(w.to(torch_dtype))
            del w
        return out, plan
    scale = args.logit_std / math.sqrt(D)
    return [(torch.randn(V, D, device=dev, dtype=torch.float32, generator=gen) * scale).to(torch_dtype)
            for _ in range(copies)], None


def make_h(torch, B, D, plan, dev, gen, torch_dtype):
    """H [B, D]: std 1; in the model-like mode, the row's topic coordinate (or a halved bulk on flat rows)."""
    h = torch.randn(B, D, device=dev, dtype=torch.float32, generator=gen)
    if plan is not None:
        K = plan["topics"]
        h[:, :K] = 0
        for b in range(B):
            c = model_row_topic(plan, b)
            if c is None:
                h[b, K:] *= MODEL_FLAT_BULK_SCALE
            else:
                h[b, c] = 1.0
    return h.to(torch_dtype)


def build_parser():
    p = argparse.ArgumentParser(description="PyTorch baselines and matrix-rate ceiling for flashsample-bench (JSON on stdout).")
    p.add_argument("--shapes", type=parse_shapes, default=None, help='JSON list: [{"name": ..., "vocab": V, "hidden": D}]')
    p.add_argument("--batches", type=parse_int_list, default=[1], help="comma-separated batch sizes")
    p.add_argument("--dtype", choices=sorted(DTYPE_BYTES), default="bf16")
    p.add_argument("--iters", type=positive_int, default=100)
    p.add_argument("--warmup", type=nonneg_int, default=10)
    p.add_argument("--baselines", type=parse_baselines, default=list(DEFAULT_BASELINES),
                   help="comma-separated, of " + ",".join(BASELINES))
    p.add_argument("--top-k", type=positive_int, default=50)
    p.add_argument("--top-p", type=positive_float, default=0.9)
    p.add_argument("--temperature", type=positive_float, default=1.0)
    p.add_argument("--logit-std", type=positive_float, default=4.0, help="standard deviation of the gaussian mode's logits")
    p.add_argument("--logits", choices=["gaussian", "model"], default="gaussian",
                   help="gaussian: every logit of std --logit-std; model: the bench's model-like mode (bench/logits.ts)")
    p.add_argument("--logits-seed", type=nonneg_int, default=MODEL_SEED, help="seed of the model-like mode's topic plan")
    p.add_argument("--option-sets", type=parse_option_sets, default=[],
                   help='JSON list of {"label", "temperature", "top_k", "top_p", "min_p", "logprobs", "top_logprobs", '
                        '"softcap", "mask"}: one pipeline per set, results under "options"')
    p.add_argument("--print-logits-plan", action="store_true",
                   help="print the model-like plan of the first --shapes entry (and the topics of --batches' largest "
                        "batch) as JSON and exit; needs no torch")
    p.add_argument("--no-matrix-rate", action="store_true", help="skip the 8192^3 matmul ceiling")
    p.add_argument("--matrix-size", type=positive_int, default=8192)
    p.add_argument("--l2-bytes", type=positive_int, default=L2_BYTES_DEFAULT)
    p.add_argument("--device-index", type=nonneg_int, default=0)
    p.add_argument("--seed", type=nonneg_int, default=1234)
    p.add_argument("--check", action="store_true", help="only report whether torch + CUDA are usable")
    return p


def rotation_copies(w_bytes, l2_bytes):
    """Enough distinct copies that their total exceeds 2 x L2; at least two."""
    return max(2, (2 * l2_bytes) // max(1, w_bytes) + 1)


def summarize(samples_us):
    s = sorted(samples_us)
    n = len(s)

    def q(x):
        pos = (n - 1) * x
        lo = int(math.floor(pos))
        hi = min(n - 1, lo + 1)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    return {"median_us": q(0.5), "p10_us": q(0.1), "p90_us": q(0.9), "min_us": s[0], "max_us": s[-1],
            "mean_us": sum(s) / n, "n": n}


def main(argv):
    args = build_parser().parse_args(argv)
    if args.print_logits_plan:
        if not args.shapes:
            build_parser().error("--print-logits-plan needs --shapes")
        V, D = args.shapes[0]["vocab"], args.shapes[0]["hidden"]
        why = model_logits_unsupported(V, D)
        if why:
            build_parser().error(why)
        plan = model_logits_plan(V, D, args.logits_seed)
        plan["rowTopics"] = [model_row_topic(plan, b) for b in range(max(args.batches))]
        emit(plan)
        return 0
    report = {
        "available": False,
        "reason": None,
        "python": platform.python_version(),
        "torch": None,
        "cuda": None,
        "gpu": None,
        "dtype": args.dtype,
        "iters": args.iters,
        "warmup": args.warmup,
        "baselines": {k: BASELINES[k] for k in args.baselines},
        "top_k": args.top_k,
        "top_p": args.top_p,
        "logits": args.logits,
        "logits_seed": args.logits_seed if args.logits == "model" else None,
        "options": {o["label"]: describe_option_set(o) for o in args.option_sets},
        "matrix_rate": None,
        "results": [],
    }

    try:
        import torch
    except Exception as exc:  # ImportError, or a broken install raising something else
        report["reason"] = "python3 has no torch (%s)" % short_error(exc)
        emit(report)
        return 0
    report["torch"] = getattr(torch, "__version__", "?")
    report["cuda"] = getattr(torch.version, "cuda", None)
    try:
        usable = torch.cuda.is_available() and torch.cuda.device_count() > args.device_index
    except Exception as exc:
        usable = False
        report["reason"] = "torch %s: no CUDA (%s)" % (report["torch"], short_error(exc))
    if not usable:
        if report["reason"] is None:
            if report["cuda"] is None:
                report["reason"] = "torch %s is built without CUDA (no CUDA)" % report["torch"]
            else:
                report["reason"] = "torch %s: no CUDA device %d visible (no CUDA)" % (report["torch"], args.device_index)
        emit(report)
        return 0

    dev = torch.device("cuda", args.device_index)
    torch.cuda.set_device(dev)
    report["gpu"] = torch.cuda.get_device_name(dev)
    report["available"] = True
    if args.check:
        emit(report)
        return 0

    torch_dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    # An honest fp32 matmul: TF32 would quietly use tensor cores at reduced precision.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)

    def time_calls(fn, copies, iters=args.iters, warmup=args.warmup):
        for i in range(warmup):
            fn(i % copies)
        torch.cuda.synchronize(dev)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        for i in range(iters):
            starts[i].record()
            fn(i % copies)
            ends[i].record()
        torch.cuda.synchronize(dev)
        return summarize([s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends)])

    with torch.inference_mode():
        # Ceiling: the matrix rate of cuBLAS on an N^3 product in bf16 (and in the run's dtype).
        if not args.no_matrix_rate:
            report["matrix_rate"] = {}
            n = args.matrix_size
            for name in sorted({"bf16", args.dtype}):
                dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[name]
                try:
                    a = [torch.randn(n, n, device=dev, dtype=dt, generator=gen) for _ in range(2)]
                    b = [torch.randn(n, n, device=dev, dtype=dt, generator=gen) for _ in range(2)]
                    s = time_calls(lambda i: a[i] @ b[i].T, 2, iters=30 if name != "f32" else 10, warmup=5)
                    flops = 2.0 * n * n * n
                    report["matrix_rate"][name] = {
                        "flops_per_s": flops / (s["median_us"] * 1e-6),
                        "tflops": flops / (s["median_us"] * 1e-6) / 1e12,
                        "size": n,
                        "median_us": s["median_us"],
                        "p10_us": s["p10_us"],
                        "p90_us": s["p90_us"],
                        "method": "torch.matmul (cuBLAS) A @ B.T, %d^3 %s, median of %d" % (n, name, s["n"]),
                    }
                    log("matrix rate %s %d^3: %.1f TFLOP/s" % (name, n, report["matrix_rate"][name]["tflops"]))
                    del a, b
                except Exception as exc:
                    report["matrix_rate"][name] = {"error": short_error(exc)}
                    log("matrix rate %s failed: %s" % (name, short_error(exc)))
                torch.cuda.empty_cache()

        shapes = args.shapes or []
        temp = args.temperature
        k, p = args.top_k, args.top_p

        def logits_of(h, w):
            return (h @ w.T).float()

        def b_matmul(h, w):
            return h @ w.T

        def b_multinomial(h, w):
            probs = torch.softmax(logits_of(h, w) / temp, dim=-1)
            return torch.multinomial(probs, 1)

        def b_gumbel(h, w):
            logits = logits_of(h, w) / temp
            u = torch.rand_like(logits)
            return torch.argmax(logits - torch.log(-torch.log(u)), dim=-1)

        def b_exp_race(h, w):
            probs = torch.softmax(logits_of(h, w) / temp, dim=-1)
            q = torch.empty_like(probs).exponential_()
            return torch.argmax(probs / q, dim=-1)

        def b_topk(h, w):
            vals, idx = torch.topk(logits_of(h, w) / temp, min(k, w.shape[0]), dim=-1)
            s = torch.multinomial(torch.softmax(vals, dim=-1), 1)
            return idx.gather(-1, s)

        def b_topp(h, w):
            vals, idx = torch.sort(logits_of(h, w) / temp, descending=True, dim=-1)
            probs = torch.softmax(vals, dim=-1)
            drop = (probs.cumsum(dim=-1) - probs) > p
            probs = torch.softmax(vals.masked_fill(drop, float("-inf")), dim=-1)
            s = torch.multinomial(probs, 1)
            return idx.gather(-1, s)

        fns = {"matmul": b_matmul, "multinomial": b_multinomial, "gumbel": b_gumbel, "exp-race": b_exp_race,
               "topk": b_topk, "topp": b_topp}

        option_fns = [(o["label"], option_pipeline(torch, o, logits_of), bool(o.get("mask"))) for o in args.option_sets]

        for shape in shapes:
            V, D = shape["vocab"], shape["hidden"]
            w_bytes = V * D * DTYPE_BYTES[args.dtype]
            copies = rotation_copies(w_bytes, args.l2_bytes)
            weights = []
            plan = None
            try:
                why = model_logits_unsupported(V, D) if args.logits == "model" else None
                if why:
                    raise ValueError(why)
                weights, plan = make_weights(torch, args, V, D, copies, dev, gen, torch_dtype)
            except Exception as exc:
                err = "allocating %d copies of W (%.2f GB each): %s" % (copies, w_bytes / 1e9, short_error(exc))
                log(shape["name"] + ": " + err)
                for B in args.batches:
                    report["results"].append({"shape": shape["name"], "vocab": V, "hidden": D, "batch": B,
                                              "copies": copies, "baselines": {b: {"error": err} for b in args.baselines},
                                              "options": {o: {"error": err} for o, _, _ in option_fns}})
                del weights
                torch.cuda.empty_cache()
                continue
            for B in args.batches:
                row = {"shape": shape["name"], "vocab": V, "hidden": D, "batch": B, "copies": copies, "baselines": {},
                       "options": {}}
                try:
                    hs = [make_h(torch, B, D, plan, dev, gen, torch_dtype) for _ in range(copies)]
                    allowed = None
                    if any(m for _, _, m in option_fns):
                        allowed = torch.rand(B, V, device=dev, generator=gen) < 0.5
                        allowed[:, 0] = True  # no row is empty, as bench/inputs.ts halfMask
                except Exception as exc:
                    err = "allocating H: " + short_error(exc)
                    row["baselines"] = {b: {"error": err} for b in args.baselines}
                    row["options"] = {o: {"error": err} for o, _, _ in option_fns}
                    report["results"].append(row)
                    continue
                for name in args.baselines:
                    fn = fns[name]
                    try:
                        out = fn(hs[0], weights[0])
                        if out.shape[0] != B:
                            raise RuntimeError("baseline returned shape %s for batch %d" % (tuple(out.shape), B))
                        s = time_calls(lambda i, fn=fn: fn(hs[i], weights[i]), copies)
                        row["baselines"][name] = s
                        log("%s B=%d %s: %.1f us" % (shape["name"], B, name, s["median_us"]))
                    except Exception as exc:
                        row["baselines"][name] = {"error": short_error(exc)}
                        log("%s B=%d %s failed: %s" % (shape["name"], B, name, short_error(exc)))
                        try:  # after a CUDA error the context may be unusable; still try the rest
                            torch.cuda.synchronize(dev)
                            torch.cuda.empty_cache()
                        except Exception:
                            pass
                for label, fn, masked in option_fns:
                    mask = allowed if masked else None
                    try:
                        out = fn(hs[0], weights[0], mask)
                        if out.shape[0] != B:
                            raise RuntimeError("pipeline returned shape %s for batch %d" % (tuple(out.shape), B))
                        s = time_calls(lambda i, fn=fn, mask=mask: fn(hs[i], weights[i], mask), copies)
                        row["options"][label] = s
                        log("%s B=%d [%s]: %.1f us" % (shape["name"], B, label, s["median_us"]))
                    except Exception as exc:
                        row["options"][label] = {"error": short_error(exc)}
                        log("%s B=%d [%s] failed: %s" % (shape["name"], B, label, short_error(exc)))
                        try:
                            torch.cuda.synchronize(dev)
                            torch.cuda.empty_cache()
                        except Exception:
                            pass
                report["results"].append(row)
                del hs, allowed
            del weights
            torch.cuda.empty_cache()

    emit(report)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    started = time.time()
    try:
        code = main(sys.argv[1:])
    except SystemExit:
        raise
    except BaseException as exc:  # report, never die silently: the caller reads stdout as JSON
        traceback.print_exc(file=sys.stderr)
        emit({"available": False, "reason": "torch_baselines.py failed: " + short_error(exc), "results": []})
        code = 1
    log("done in %.1f s" % (time.time() - started))
    sys.exit(code)
