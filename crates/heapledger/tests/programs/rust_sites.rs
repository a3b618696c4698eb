// A Rust program for rust_program.rs: allocations through Vec and format!,
// whose sites must be the program's functions, not the allocator plumbing.
mod store {
    pub struct Store {
        pub items: Vec<String>,
    }

    impl Store {
        #[inline(never)]
        pub fn add(&mut self, i: usize) {
            self.items.push(format!("item-{i:05}")); // SITE:add
        }
    }
}

#[inline(never)]
fn boxed(n: usize) -> Vec<Box<[u64; 4]>> {
    (0..n).map(|i| Box::new([i as u64; 4])).collect() // SITE:boxed
}

fn main() {
    let mut s = store::Store { items: Vec::with_capacity(500) };
    for i in 0..500 {
        s.add(i);
    }
    let b = boxed(300);
    println!("{} {}", s.items.len(), b.len());
}
