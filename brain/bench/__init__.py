"""The bench wing: ``brain bench``, a load generator and meter for any OpenAI-compatible endpoint.

In the spirit of ``vllm bench serve`` (fixed-concurrency and Poisson request-rate sweeps,
percentiles of TTFT / TPOT / ITL / E2E, request and token throughput, speculative-decoding
acceptance from ``/metrics`` counter deltas) and llama-benchy (prefill and decode speed of a
single request against context depth).

Modules, one job each: ``models`` (the config, prompt and result values), ``prompts``
(synthetic, depth and dataset prompts, calibrated on the server's tokenizer), ``sender`` (one
streamed request, timed), ``endpoint`` (root URL, model, ``/metrics``, the HTTP client),
``stats`` (timings reduced to figures, and what each figure means), ``drivers`` (load points,
depths, ``run_bench``), ``replay/`` (recorded agent runs replayed, prefix caches and all: a
folder of its own, modules as these), ``report`` (tables, Markdown, JSON), ``plot`` (the
PNG), ``output`` (the ending both share) and ``cli`` (the command).

It must not start or stop servers, nor import ``pilot``: it measures whatever answers at the
URL it is given.
"""
