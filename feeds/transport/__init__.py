"""Transport shared by live clients: the numba websocket client and socket intrinsics."""
