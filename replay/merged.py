"""`--merge`: several tick files as one stream in receive-time order (engine/universe.py merge, the
order `engine run --feed tickfile:A --feed tickfile:B` reads them in), written as a tick file so
the backtest, its report and a later `engine run --feed tickfile:MERGED` all read the same ticks."""
import os

from engine.outputs import OutputError
from engine.tickfile import TickFile, TickFileError, TickFileWriter
from engine.universe import merge, source_labels
from replay.jobs import MERGED


def write_merged(files, out_path, need_depth=0):
    """Merge tick files into out_path (whole or not at all); returns its path. need_depth: the
    book levels the strategy reads, which every file must carry (as every feed of a run must)."""
    streams, depths = [], []
    for f in files:
        try:
            tf = TickFile(f)
        except TickFileError as e:
            raise ValueError(str(e)) from None
        streams.append((tf.words, list(tf.instruments), list(tf.specs or [])))
        depths.append(int(getattr(tf, "depth", 0) or 0))
    # labelled as `engine run --feed tickfile:A --feed tickfile:B` labels them: the same names
    short = [(f, d) for f, d in zip(files, depths) if d < need_depth]
    if short:
        raise ValueError(f"{short[0][0]}: carries {short[0][1]} book levels a side and the strategy reads DEPTH "
                         f"{need_depth}")
    words, names, specs = merge(streams, source_labels([f"tickfile:{f}" for f in files]))
    tmp = f"{out_path}.tmp-{os.getpid()}"
    # (the widest window, as a run of the files as feeds and `train --merge` keep: a narrower book
    # would lose the levels a deeper source sends once)
    w = TickFileWriter(tmp, names, source=MERGED + " + ".join(os.path.realpath(str(f)) for f in files),
                       depth=max(depths), specs=specs)
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
