"""The message bus: subjects, the event catalogue, the Bus protocol, its implementations (JetStream,
in memory) and the one consumer loop every service uses.

Services speak the Bus protocol (kernelfoundry.bus.protocol) and hand the consumer loop their handlers;
only kernelfoundry.bus.jetstream imports nats.
"""
