//! Element-wise reductions of the ranks' inputs, in bytes of any NCCL data type. Every rank
//! combines the inputs in rank order, so all get the same bits (as NCCL's ring gives every
//! rank the same result). The work is done in C (`reduce.c`, optimized in every profile), but
//! for the 16-bit floats: combined here in `f32` and rounded back to nearest even.

use super::{DataType, RedOp};

/// One element of a data type.
trait Lane: Copy {
    const SIZE: usize;
    fn load(b: &[u8]) -> Self;
    fn store(self, b: &mut [u8]);
    fn combine(self, other: Self, op: RedOp) -> Self;
    /// Divided by the number of ranks (the average).
    fn divide(self, n: usize) -> Self;
}

fn bytes<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[..N]);
    a
}

/// The 16-bit floats are combined as `f32` (reduce.c does the other types).
impl Lane for f32 {
    const SIZE: usize = 4;
    fn load(b: &[u8]) -> Self {
        f32::from_ne_bytes(bytes(b))
    }
    fn store(self, b: &mut [u8]) {
        b.copy_from_slice(&self.to_ne_bytes());
    }
    fn combine(self, o: Self, op: RedOp) -> Self {
        match op {
            RedOp::Sum | RedOp::Avg => self + o,
            RedOp::Prod => self * o,
            RedOp::Max => self.max(o),
            RedOp::Min => self.min(o),
        }
    }
    fn divide(self, n: usize) -> Self {
        self / n.max(1) as f32
    }
}

/// IEEE half precision, combined in `f32`.
#[derive(Clone, Copy)]
struct Half(u16);
/// bfloat16, combined in `f32`.
#[derive(Clone, Copy)]
struct Bf16(u16);

pub(crate) fn half_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match exp {
        0 if man == 0 => sign,
        0 => {
            // Subnormal: man x 2^-24.
            let v = man as f32 * f32::from_bits(0x3380_0000);
            return if sign != 0 { -v } else { v };
        }
        0x1f => sign | 0x7f80_0000 | (man << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

pub(crate) fn f32_to_half(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let man = x & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    let round = |kept: u32, rest: u32, half: u32| {
        if rest > half || (rest == half && kept & 1 == 1) {
            kept + 1
        } else {
            kept
        }
    };
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        // Subnormal: the mantissa with its leading 1, in units of 2^-24.
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let kept = m >> shift;
        let rest = m & ((1 << shift) - 1);
        return sign | round(kept, rest, 1 << (shift - 1)) as u16;
    }
    // A carry out of the mantissa raises the exponent, up to infinity: still right.
    let kept = ((e as u32) << 10) | (man >> 13);
    sign | round(kept, man & 0x1fff, 0x1000) as u16
}

pub(crate) fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

pub(crate) fn f32_to_bf16(f: f32) -> u16 {
    let x = f.to_bits();
    if f.is_nan() {
        return ((x >> 16) | 0x40) as u16;
    }
    let rounded = x.wrapping_add(0x7fff + ((x >> 16) & 1));
    (rounded >> 16) as u16
}

macro_rules! short_float_lane {
    ($t:ident, $to:ident, $from:ident) => {
        impl Lane for $t {
            const SIZE: usize = 2;
            fn load(b: &[u8]) -> Self {
                $t(u16::from_ne_bytes(bytes(b)))
            }
            fn store(self, b: &mut [u8]) {
                b.copy_from_slice(&self.0.to_ne_bytes());
            }
            fn combine(self, o: Self, op: RedOp) -> Self {
                $t($from($to(self.0).combine($to(o.0), op)))
            }
            fn divide(self, n: usize) -> Self {
                $t($from($to(self.0).divide(n)))
            }
        }
    };
}

short_float_lane!(Half, half_to_f32, f32_to_half);
short_float_lane!(Bf16, bf16_to_f32, f32_to_bf16);

fn combine<L: Lane>(acc: &mut [u8], other: &[u8], op: RedOp) {
    for (a, b) in acc
        .chunks_exact_mut(L::SIZE)
        .zip(other.chunks_exact(L::SIZE))
    {
        L::load(a).combine(L::load(b), op).store(a);
    }
}

fn divide<L: Lane>(acc: &mut [u8], n: usize) {
    for a in acc.chunks_exact_mut(L::SIZE) {
        L::load(a).divide(n).store(a);
    }
}

extern "C" {
    fn simnccl_combine(acc: *mut u8, other: *const u8, n: usize, dtype: i32, op: i32) -> i32;
    fn simnccl_divide(acc: *mut u8, n: usize, dtype: i32, ranks: usize) -> i32;
}

/// `acc[i] = acc[i] op other[i]` over the shorter of the two (the average sums; [`finish`]
/// divides). In C (`reduce.c`, optimized in every profile) but for the 16-bit floats.
pub(crate) fn combine_into(acc: &mut [u8], other: &[u8], dtype: DataType, op: RedOp) {
    let n = acc.len().min(other.len()) / dtype.size();
    // SAFETY: both buffers hold `n` elements of `dtype`; reduce.c reads and writes no more.
    let done = unsafe {
        simnccl_combine(
            acc.as_mut_ptr(),
            other.as_ptr(),
            n,
            dtype.raw() as i32,
            op.raw() as i32,
        )
    };
    // The 16-bit floats, which reduce.c leaves to Rust.
    match dtype {
        DataType::F16 if done != 0 => combine::<Half>(acc, other, op),
        DataType::Bf16 if done != 0 => combine::<Bf16>(acc, other, op),
        _ => {}
    }
}

/// Completes a reduction of `nranks` inputs: the average divides the sum.
pub(crate) fn finish(acc: &mut [u8], dtype: DataType, op: RedOp, nranks: usize) {
    if op != RedOp::Avg {
        return;
    }
    let n = acc.len() / dtype.size();
    // SAFETY: `acc` holds `n` elements of `dtype`.
    let done = unsafe { simnccl_divide(acc.as_mut_ptr(), n, dtype.raw() as i32, nranks) };
    match dtype {
        DataType::F16 if done != 0 => divide::<Half>(acc, nranks),
        DataType::Bf16 if done != 0 => divide::<Bf16>(acc, nranks),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    fn back(b: &[u8]) -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_ne_bytes(bytes(c)))
            .collect()
    }

    #[test]
    fn every_operation_on_floats() {
        for (op, want) in [
            (RedOp::Sum, [5.0, -1.0]),
            (RedOp::Prod, [6.0, -2.0]),
            (RedOp::Max, [3.0, 1.0]),
            (RedOp::Min, [2.0, -2.0]),
            (RedOp::Avg, [2.5, -0.5]),
        ] {
            let mut acc = f32s(&[2.0, 1.0]);
            combine_into(&mut acc, &f32s(&[3.0, -2.0]), DataType::F32, op);
            finish(&mut acc, DataType::F32, op, 2);
            assert_eq!(back(&acc), want, "{op:?}");
        }
    }

    #[test]
    fn integers_wrap_and_average_in_their_type() {
        let mut acc = vec![250u8, 7];
        combine_into(&mut acc, &[10, 2], DataType::U8, RedOp::Sum);
        assert_eq!(acc, [4, 9]);
        let mut acc: Vec<u8> = (-7i32).to_ne_bytes().to_vec();
        combine_into(&mut acc, &(-2i32).to_ne_bytes(), DataType::I32, RedOp::Avg);
        finish(&mut acc, DataType::I32, RedOp::Avg, 2);
        assert_eq!(i32::from_ne_bytes(bytes(&acc)), -4);
    }

    #[test]
    fn the_c_lanes_wrap_skip_nan_and_truncate() {
        let mut acc = i64::MAX.to_ne_bytes().to_vec();
        combine_into(&mut acc, &1i64.to_ne_bytes(), DataType::I64, RedOp::Sum);
        assert_eq!(i64::from_ne_bytes(bytes(&acc)), i64::MIN);
        let mut acc = f64::NAN.to_ne_bytes().to_vec();
        combine_into(&mut acc, &2.5f64.to_ne_bytes(), DataType::F64, RedOp::Max);
        assert_eq!(
            f64::from_ne_bytes(bytes(&acc)),
            2.5,
            "NaN skipped, as f64::max"
        );
        combine_into(&mut acc, &f64::NAN.to_ne_bytes(), DataType::F64, RedOp::Min);
        assert_eq!(f64::from_ne_bytes(bytes(&acc)), 2.5);
        let mut acc = (-9i8).to_ne_bytes().to_vec();
        finish(&mut acc, DataType::I8, RedOp::Avg, 200);
        assert_eq!(acc, [0]);
        let mut acc = vec![3u8, 1];
        combine_into(&mut acc, &[200, 7], DataType::U8, RedOp::Prod);
        assert_eq!(acc, [88, 7], "600 wraps to 88");
        // Unaligned buffers are fine.
        let mut raw = [0u8; 9];
        raw[1..9].copy_from_slice(&7u64.to_ne_bytes());
        combine_into(
            &mut raw[1..9],
            &5u64.to_ne_bytes(),
            DataType::U64,
            RedOp::Min,
        );
        assert_eq!(u64::from_ne_bytes(bytes(&raw[1..9])), 5);
    }

    #[test]
    fn half_floats_round_trip_and_round_to_nearest_even() {
        for h in [
            0u16, 0x3c00, 0xc000, 0x7bff, 0x0001, 0x03ff, 0x0400, 0x7c00, 0xfc00,
        ] {
            assert_eq!(f32_to_half(half_to_f32(h)), h, "{h:#x}");
        }
        assert_eq!(half_to_f32(0x3c00), 1.0);
        assert_eq!(half_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f32_to_half(65520.0), 0x7c00, "rounds up to infinity");
        assert_eq!(
            f32_to_half(1.0 + 2f32.powi(-11)),
            0x3c00,
            "a tie goes to even"
        );
        assert!(half_to_f32(f32_to_half(f32::NAN)).is_nan());
        assert_eq!(f32_to_half(1e-10), 0);
        let mut acc = 0x3c00u16.to_ne_bytes().to_vec();
        combine_into(
            &mut acc,
            &0x4000u16.to_ne_bytes(),
            DataType::F16,
            RedOp::Sum,
        );
        assert_eq!(half_to_f32(u16::from_ne_bytes(bytes(&acc))), 3.0);
    }

    #[test]
    fn bfloat16_rounds_to_nearest_even() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        assert_eq!(
            f32_to_bf16(f32::from_bits(0x3f80_8000)),
            0x3f80,
            "tie to even"
        );
        assert_eq!(
            f32_to_bf16(f32::from_bits(0x3f81_8000)),
            0x3f82,
            "tie to even"
        );
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
        let mut acc = f32_to_bf16(1.5).to_ne_bytes().to_vec();
        combine_into(
            &mut acc,
            &f32_to_bf16(2.0).to_ne_bytes(),
            DataType::Bf16,
            RedOp::Prod,
        );
        assert_eq!(bf16_to_f32(u16::from_ne_bytes(bytes(&acc))), 3.0);
    }
}
