"""The market simulator (synthetic://) and its generator."""
