"""A Dask client for the work that spreads over processes or machines: backtests and sweeps
(replay/), training (models/dask_train.py)."""
import contextlib


@contextlib.contextmanager
def dask_client(workers, scheduler=None):
    """A client of the cluster at `scheduler`, or of a LocalCluster of `workers` single-threaded
    processes started (and stopped) here."""
    from dask.distributed import Client, LocalCluster
    cluster = None
    if scheduler:
        client = Client(scheduler)
    else:
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                               silence_logs=40)
        client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
