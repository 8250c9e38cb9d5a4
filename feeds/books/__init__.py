"""Order books: the L2/L3 book, its deep side, the ticks written from a book, the depth windows a feed
publishes, the crossed-book watch."""
