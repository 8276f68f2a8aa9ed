"""Brain: the vLLM server's whole life (spec, launch, readiness, diagnosis, supervision, metrics).

The brain never imports the pilot; it meets the pilot only over HTTP and the shared database.
"""

__version__ = "0.1.0"
