//! Teardown that happens even on failure or Ctrl-C: an undo stack. (Being written.)
