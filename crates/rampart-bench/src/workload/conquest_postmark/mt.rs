//! PostMark's random number generator, bit for bit: the 1999-10-28 integer MT19937 of
//! Matsumoto and Nishimura as pasted into postmark.c since v1.5 (`sgenrand`, `genrand`), and
//! its `RND(x)` macro. Replicating it lets our driver make the same choices as the real tool
//! from the same seed.

const N: usize = 624;
const M: usize = 397;
const MATRIX_A: u32 = 0x9908_b0df;
const UPPER_MASK: u32 = 0x8000_0000;
const LOWER_MASK: u32 = 0x7fff_ffff;

/// Mersenne Twister state. postmark.c keeps it in `unsigned long` (64-bit on Linux), but every
/// value it stores is masked to 32 bits, so `u32` arithmetic gives identical results.
pub struct Mt19937 {
    state: [u32; N],
    index: usize,
}

impl Mt19937 {
    /// `sgenrand(seed)`: this version fills each word from two steps of the linear
    /// congruential generator `seed = 69069 * seed + 1`, high halves only.
    pub fn new(seed: u32) -> Mt19937 {
        let mut state = [0u32; N];
        let mut s = seed;
        for word in state.iter_mut() {
            *word = s & 0xffff_0000;
            s = s.wrapping_mul(69069).wrapping_add(1);
            *word |= (s & 0xffff_0000) >> 16;
            s = s.wrapping_mul(69069).wrapping_add(1);
        }
        Mt19937 { state, index: N }
    }

    /// `genrand()`: the next 32-bit output.
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^= y >> 18;
        y
    }

    /// `RND(x)`: `genrand() % x`, and 0 *without drawing* when `x` is 0, which matters for
    /// staying in step with postmark (e.g. appending to a file one byte short of the maximum).
    pub fn rnd(&mut self, x: u32) -> u32 {
        if x > 0 {
            self.next_u32() % x
        } else {
            0
        }
    }

    fn twist(&mut self) {
        let mag01 = |y: u32| if y & 1 == 0 { 0 } else { MATRIX_A };
        for kk in 0..N {
            let y = (self.state[kk] & UPPER_MASK) | (self.state[(kk + 1) % N] & LOWER_MASK);
            self.state[kk] = self.state[(kk + M) % N] ^ (y >> 1) ^ mag01(y);
        }
        self.index = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outputs of postmark.c's generator code compiled with gcc on x86-64 (where its
    /// `unsigned long` is 64 bits): the first five for seed 4357 (its default seed), and
    /// draws 1301 and 1302 for seed 42 (past two regenerations of the state).
    #[test]
    fn matches_postmark_c_outputs() {
        let mut mt = Mt19937::new(4357);
        let first: Vec<u32> = (0..5).map(|_| mt.next_u32()).collect();
        assert_eq!(
            first,
            [
                2_867_219_139,
                1_585_203_162,
                3_113_124_129,
                2_953_900_839,
                2_463_794_868
            ]
        );
        let mut mt = Mt19937::new(42);
        for _ in 0..1300 {
            mt.next_u32();
        }
        assert_eq!([mt.next_u32(), mt.next_u32()], [954_307_032, 403_128_461]);
    }

    #[test]
    fn rnd_of_zero_draws_nothing() {
        let mut a = Mt19937::new(42);
        let mut b = Mt19937::new(42);
        assert_eq!(a.rnd(0), 0);
        assert_eq!(a.next_u32(), b.next_u32());
    }
}
