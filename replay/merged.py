"""`--merge`: several tick files as one stream in receive-time order (engine/universe.py merge, the
order `engine run --feed tickfile:A --feed tickfile:B` reads them in), written as a tick file so
the backtest, its report and a later `engine run --feed tickfile:MERGED` all read the same ticks."""
import os

from engine.outputs import OutputError
from engine.tickfile import TickFile, TickFileError, TickFileWriter
from engine.universe import merge, source_labels


def write_merged(files, out_path):
    """Merge tick files into out_path (whole or not at all); returns its path."""
    streams, depths = [], []
    for f in files:
        try:
            tf = TickFile(f)
        except TickFileError as e:
            raise ValueError(str(e)) from None
        streams.append((tf.words, list(tf.instruments), list(tf.specs or [])))
        depths.append(int(getattr(tf, "depth", 0) or 0))
    # labelled as `engine run --feed tickfile:A --feed tickfile:B` labels them: the same names
    words, names, specs = merge(streams, source_labels([f"tickfile:{f}" for f in files]))
    tmp = f"{out_path}.tmp-{os.getpid()}"
    w = TickFileWriter(tmp, names, source="merge: " + " + ".join(map(str, files)), depth=min(depths), specs=specs)
    try:
        w.append(words)
        w.close()
    except OutputError:
        raise
    except BaseException:
        w.close(fsync=False)
        os.unlink(tmp)
        raise
    os.replace(tmp, out_path)
    return str(out_path)
