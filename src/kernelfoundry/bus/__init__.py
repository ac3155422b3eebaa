"""The JetStream bus: streams, subjects, publishing, the shared consumer loop and the artifact store.

The only package that imports nats. Services hand it handlers; they never touch NATS directly.
"""
