"""The model pool: which models are loaded (memory budget, LRU, pins, TTL) and their handles."""
