// A Rust program with two allocation sites a user should see by name:
// `grow_table` grows a Vec<u64> by push to 192 MiB (reserve advice), and `render_frames` makes and
// drops a 32 MiB frame buffer 24 times (reuse advice). Built by the tests with `rustc -O -g`, with
// and without `-C force-frame-pointers=yes`.
use std::hint::black_box;

#[inline(never)]
fn grow_table(entries: usize) -> u64 {
    let mut table: Vec<u64> = Vec::new();
    for i in 0..entries {
        table.push(i as u64);
    }
    black_box(&table);
    table[entries / 2]
}

#[inline(never)]
fn render_frames(frames: usize, bytes: usize) -> u64 {
    let mut sum = 0u64;
    for frame in 0..frames {
        let mut buffer = vec![0u8; bytes];
        for page in (0..bytes).step_by(4096) {
            buffer[page] = frame as u8 + 1;
        }
        black_box(&mut buffer);
        sum += buffer[bytes / 2] as u64;
    }
    sum
}

fn main() {
    let a = grow_table(192 * 1024 * 1024 / 8);
    let b = render_frames(24, 32 * 1024 * 1024);
    println!("{} {}", a, b);
}
