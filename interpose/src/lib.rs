//! libsyncspy.so (work in progress)
