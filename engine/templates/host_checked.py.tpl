_checked_${fn} = _checked[${fn_literal}]


@_njit(nogil=True, boundscheck=True)
def ${fn}(${args}):
    try:
        return _checked_${fn}(${args})
    except Exception:
        pass
    raise IndexError(${why_literal})


