//! Call trees (top-down and bottom-up) with the four degrees of recursion collapsing.
