"""The replay family of ``brain bench``: recorded agent runs replayed against an endpoint.

Modules as the bench's own, one job each: ``files`` (replay files read: the runs, their
requests), ``models`` (the config and result values), ``run`` (the replay driven, point by
point), ``stats`` (timings reduced to figures per point and depth), ``report`` (tables,
Markdown, the plot) and ``cli`` (the command's replay side). What the bench and the replay
share (the sender, the endpoint, percentiles, ratios and the comparison of two endpoints)
is the bench's, imported from ``brain.bench``.

Like the bench, it must not start or stop servers, nor import ``pilot``.
"""
