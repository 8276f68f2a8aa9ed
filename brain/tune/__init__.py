"""``brain tune PROFILE``: choose the speculative-decoding setting on the user's own traffic.

What wins (speculation off, ngram, MTP, a draft model; which k) depends on the model, the
traffic, the concurrency and the context depth, and one pass of each setting decides nothing:
the same server decodes identical requests 30% faster or slower a minute apart. So the tune
starts every candidate side by side, replays recorded agent runs against them in interleaved
rounds at each concurrency, and keeps going until each difference is outside the noise (or the
time budget is spent), preferring "off" when nothing wins clearly. The parts:

* ``candidates``: the settings to try, parsed and checked against the profile;
* ``servers``: the candidates' servers, started (or found running) and stopped;
* ``measure``: one replay of the traffic against one candidate at one concurrency;
* ``decide``: paired intervals per (concurrency, depth) and the winner;
* ``report`` / ``profile_out``: the table, the plot, the evidence and the tuned profile;
* ``run``: the rounds; ``cli``: the command.
"""
