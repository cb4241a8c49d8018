//! Conv2d and ConvTranspose2d layers: a geometry, a weight range, and the three passes.
//! ConvTranspose2d runs the conv ops backwards (see ops/conv): forward = backward-data.

use super::params::ParamStore;
use crate::backend::{Backend, View, ViewMut};
use crate::ops::conv::ConvGeom;
use std::ops::Range;

#[derive(Clone, Debug)]
pub struct ConvLayer {
    /// The forward convolution this layer is (Conv2d) or is the transpose of (ConvTranspose2d).
    pub geom: ConvGeom,
    pub transposed: bool,
    /// Weight range in the network's ParamStore: Conv2d `[out,in,k,k]`, ConvT `[in,out,k,k]`.
    pub weight: Range<usize>,
}

impl ConvLayer {
    /// Channels, height and width of this layer's output.
    pub fn output_shape(&self) -> (usize, usize, usize) {
        let g = &self.geom;
        if self.transposed { (g.c_in, g.h_in, g.w_in) } else { (g.c_out, g.h_out, g.w_out) }
    }
    pub fn output_len(&self) -> usize {
        let (c, h, w) = self.output_shape();
        c * self.geom.batch * h * w
    }

    /// y [C_out, B, OH, OW] = layer(x [C_in, B, H, W]).
    pub fn forward<B: Backend>(&self, be: &B, p: &ParamStore<B>, x: View<B>, y: ViewMut<B>) {
        let w = p.value(&self.weight);
        if self.transposed {
            be.conv2d_backward_data(&self.geom, x, w, y);
        } else {
            be.conv2d_forward(&self.geom, x, w, y);
        }
    }

    /// dx (input-shaped) from dy (output-shaped).
    pub fn backward_data<B: Backend>(&self, be: &B, p: &ParamStore<B>, dy: View<B>, dx: ViewMut<B>) {
        let w = p.value(&self.weight);
        if self.transposed {
            be.conv2d_forward(&self.geom, dy, w, dx);
        } else {
            be.conv2d_backward_data(&self.geom, dy, w, dx);
        }
    }

    /// The weight gradient from the layer's input x and output gradient dy, written into
    /// the store's grad range (or added to it).
    pub fn backward_weight<B: Backend>(
        &self,
        be: &B,
        p: &mut ParamStore<B>,
        x: View<B>,
        dy: View<B>,
        accumulate: bool,
    ) {
        let r = self.weight.clone();
        let dw = p.grad_mut(&r);
        if self.transposed {
            // The conv's input is this layer's output side, its output gradient is our input.
            be.conv2d_backward_weight(&self.geom, dy, x, dw, accumulate);
        } else {
            be.conv2d_backward_weight(&self.geom, x, dy, dw, accumulate);
        }
    }
}
