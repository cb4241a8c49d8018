//! Networks built from stages: the generic sequential `Net` and the DCGAN architectures.

pub mod dcgan;
pub mod net;
