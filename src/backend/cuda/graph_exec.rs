//! A recorded segment as a CUDA graph on the GPU: a chain of kernel nodes built through the
//! driver API (so each node's handle is known, in launch order), instantiated once, its
//! nodes' arguments updated in place when a step passes different ones.

use super::driver::Driver;
use super::graph::LaunchRecord;
use cudarc::driver::{CudaContext, sys};
use std::sync::Arc;

/// An instantiated graph and its kernel nodes, in the order of the records it was built from.
pub(crate) struct GraphExec {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    nodes: Vec<sys::CUgraphNode>,
    /// The context the graph lives in, kept alive and bound until the graph is destroyed.
    ctx: Arc<CudaContext>,
}

// The handles belong to the context, which any thread may bind; the backend uses them from
// one thread at a time (behind the recorder's mutex).
unsafe impl Send for GraphExec {}

impl Drop for GraphExec {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: both handles were created by `build_graph` and are destroyed once, here (an
        // instance still running is freed by the driver when it completes).
        unsafe {
            let _ = sys::cuGraphExecDestroy(self.exec);
            let _ = sys::cuGraphDestroy(self.graph);
        }
    }
}

/// Panic with what failed (`what` and the kernel's name, formatted only then).
fn check(what: &str, kernel: &str, r: sys::CUresult) {
    if let Err(e) = r.result() {
        panic!("CUDA graph: {what}{kernel} failed: {e}");
    }
}

impl Driver {
    /// The node parameters of one recorded launch (pointing into `r`'s arguments, which the
    /// driver copies when the node is made or updated).
    fn node_params(&self, r: &mut LaunchRecord) -> sys::CUDA_KERNEL_NODE_PARAMS {
        // SAFETY: an all-zero CUDA_KERNEL_NODE_PARAMS is valid (null kern and ctx: use `func`
        // in the current context).
        let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
        p.func = self.function(r.family, r.index).cu_function();
        (p.gridDimX, p.gridDimY, p.gridDimZ) = r.dims.grid;
        (p.blockDimX, p.blockDimY, p.blockDimZ) = r.dims.block;
        p.sharedMemBytes = r.dims.shared_bytes;
        p.kernelParams = r.params().as_mut_ptr();
        p
    }

    /// A graph launching `launches` one after another on the compute stream.
    pub fn build_graph(&self, launches: &mut [LaunchRecord]) -> GraphExec {
        self.bind();
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        check("creating a graph", "", unsafe { sys::cuGraphCreate(&mut graph, 0) });
        let mut nodes: Vec<sys::CUgraphNode> = Vec::with_capacity(launches.len());
        for r in launches.iter_mut() {
            let p = self.node_params(r);
            let mut node: sys::CUgraphNode = std::ptr::null_mut();
            let deps: &[sys::CUgraphNode] = nodes.last().map(std::slice::from_ref).unwrap_or(&[]);
            check("adding kernel ", r.name, unsafe {
                sys::cuGraphAddKernelNode_v2(&mut node, graph, deps.as_ptr(), deps.len(), &p)
            });
            nodes.push(node);
        }
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        check("instantiating a graph", "", unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) });
        GraphExec { graph, exec, nodes, ctx: self.ctx.clone() }
    }

    /// Give node `i` of `g` the arguments `r` holds now.
    pub fn patch_graph_kernel(&self, g: &GraphExec, i: usize, r: &mut LaunchRecord) {
        self.bind();
        let p = self.node_params(r);
        check("updating kernel ", r.name, unsafe { sys::cuGraphExecKernelNodeSetParams_v2(g.exec, g.nodes[i], &p) });
    }

    /// Launch `g` on the compute stream.
    pub fn launch_graph(&self, g: &GraphExec) {
        self.bind();
        check("launching a graph", "", unsafe { sys::cuGraphLaunch(g.exec, self.compute.cu_stream()) });
    }
}
