//! Run outputs: sample grids (PNG), JSON lines, progress display, Chrome trace.
