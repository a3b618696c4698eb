// Prints the address of a Rust method and the executable mappings, in the
// same format as probe.c.

mod shapes {
    pub struct Circle(pub f64);

    impl Circle {
        #[inline(never)]
        pub fn area(&self) -> f64 {
            std::hint::black_box(self.0) * self.0 * std::f64::consts::PI
        }
    }
}

fn main() {
    let area: fn(&shapes::Circle) -> f64 = shapes::Circle::area;
    std::hint::black_box(area(&shapes::Circle(2.0)));
    println!("SYM area {:p}", area as *const ());
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    for line in maps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let [range, perms, offset, _, _, path] = fields[..] {
            if perms.as_bytes()[2] == b'x' && path.starts_with('/') {
                let (start, end) = range.split_once('-').unwrap();
                println!("MAP {start} {end} {offset} {path}");
            }
        }
    }
}
