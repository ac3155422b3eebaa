"""Running the whole system on one machine: an embedded JetStream server and every service as a process."""
