"""What every source shares: the source registry and URI grammar, capture files, publishing into
the ring, venue facts, feed latency, the JSON scanner."""
