//! Layer 3, per-thread state: the thread-local block (`tls.rs`), the
//! thread's state and the registry of all of them (`state.rs`), how states
//! are made, retired and reused (`life.rs`), the rows an ended thread keeps
//! per stack (`kept.rs`), its scatter counts (`scatter.rs`), the thread's stack bounds
//! (`bounds.rs`), holding threads out of their hooks while a checkpoint
//! reads their tables (`freeze.rs`), and the two stacks of its own a thread may be given: the
//! alternate signal stack (`altstack.rs`) and the side stack hooks run on
//! where the program's stack is short (`side.rs`).

pub mod altstack;
pub mod bounds;
pub mod freeze;
pub mod kept;
pub mod life;
pub mod scatter;
pub mod shadow;
pub mod side;
pub mod state;
pub mod tls;
pub mod user;
