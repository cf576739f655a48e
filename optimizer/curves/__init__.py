"""Analytic cost curves: pure functions on numbers and arrays, no optimizer, no I/O.

shapes       model, hardware, efficiency and replica descriptions (base units)
memory       KV bytes per token, KV budget, concurrency ceiling
roofline     prefill time, decode step time, TP/EP communication
batching     decode operating point under ITL, batching knee, price floor
speculative  expected tokens per step, break-even acceptance
cache        prompt-cache savings and its KV share
queueing     Erlang C, the wait's law (Allen–Cunneen), SLO capacity f(n) (batching pools too)
tail         the p99 of wait + the stages after it, mixtures of pools, inter-token gaps
prefill_batch  several prompts in one prefill pass: pass time, head-of-line packing of a token budget
transfer     disaggregated KV transfer
economics    $/M tokens, reserved vs on-demand, owned TCO, tokens/s per MW
lengths      prompt/output length distributions and service-time moments
"""
