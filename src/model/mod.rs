//! Networks built from stages: the generic sequential `Net`, the DCGAN architectures and the
//! generator's noise.

pub mod dcgan;
pub mod net;
pub mod noise;
pub mod penalty;
