//! rdmablk target daemon library.
