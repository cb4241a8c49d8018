//! Pointwise activations, forward in place and backward from the saved output.
//! CPU side in `cpu.rs`, CUDA launchers in `cuda.rs`.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;

/// The activations of the DCGAN. `None` lets batch norm run without a fused activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Activation {
    None,
    Relu,
    /// LeakyReLU(0.2), the DCGAN discriminator's.
    LeakyRelu,
    Tanh,
    Sigmoid,
}

pub const LEAKY_SLOPE: f32 = 0.2;

/// `per_activation!(act, ACT => body)`: `body` compiled once per activation with `ACT` a
/// constant, so an element loop calling `ACT.apply(v)` has no `match` per element and, for
/// ReLU and LeakyReLU, no branch on the sign of the data: those loops (and None's) vectorize.
/// Tanh and sigmoid still call the scalar `tanhf`/`expf` per element.
#[macro_export]
macro_rules! per_activation {
    ($act:expr, $a:ident => $body:expr) => {
        $crate::per_activation!(@arms $act, $a, $body; None, Relu, LeakyRelu, Tanh, Sigmoid)
    };
    (@arms $act:expr, $a:ident, $body:expr; $($variant:ident),*) => {
        match $act {
            $($crate::ops::activation::Activation::$variant => {
                const $a: $crate::ops::activation::Activation = $crate::ops::activation::Activation::$variant;
                $body
            })*
        }
    };
}

impl Activation {
    /// Integer code passed to CUDA kernels (kept in sync with kernels/common.cuh).
    pub fn code(self) -> i32 {
        match self {
            Activation::None => 0,
            Activation::Relu => 1,
            Activation::LeakyRelu => 2,
            Activation::Tanh => 3,
            Activation::Sigmoid => 4,
        }
    }

    #[inline(always)]
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Activation::None => x,
            Activation::Relu => x.max(0.0),
            Activation::LeakyRelu => {
                if x > 0.0 {
                    x
                } else {
                    LEAKY_SLOPE * x
                }
            }
            Activation::Tanh => x.tanh(),
            Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        }
    }

    /// The derivative, written in terms of the output y = apply(x), so backward needs only y.
    /// (ReLU and LeakyReLU(0.2) keep the sign of x, so y > 0 iff x > 0.)
    #[inline(always)]
    pub fn grad_from_output(self, y: f32) -> f32 {
        match self {
            Activation::None => 1.0,
            Activation::Relu => {
                if y > 0.0 {
                    1.0
                } else {
                    0.0
                }
            }
            Activation::LeakyRelu => {
                if y > 0.0 {
                    1.0
                } else {
                    LEAKY_SLOPE
                }
            }
            Activation::Tanh => 1.0 - y * y,
            Activation::Sigmoid => y * (1.0 - y),
        }
    }
}
