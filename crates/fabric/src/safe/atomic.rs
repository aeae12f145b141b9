//! The element types of the safe atomics.

use fabric_core::objects::Datatype;

mod sealed {
    pub trait Sealed {}
}

/// A type the safe atomics operate on: the integers of 8 to 64 bits, `f32`
/// and `f64`, each with its `FI_*` datatype.
///
/// Values travel in a 64-bit word whose first bytes in memory are the
/// value's own (native byte order), which is how the operation buffers of
/// the object traits hold them.
pub trait AtomicValue: Copy + Send + 'static + sealed::Sealed {
    /// The datatype of the operation (`FI_UINT64`, ...).
    const DATATYPE: Datatype;

    /// The value in its word.
    fn to_word(self) -> u64;

    /// The value of a word [`to_word`](AtomicValue::to_word) wrote.
    fn from_word(word: u64) -> Self;
}

macro_rules! atomic_value {
    ($($t:ty => $dt:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}

        impl AtomicValue for $t {
            const DATATYPE: Datatype = Datatype::$dt;

            fn to_word(self) -> u64 {
                let mut w = [0u8; 8];
                let b = self.to_ne_bytes();
                w[..b.len()].copy_from_slice(&b);
                u64::from_ne_bytes(w)
            }

            fn from_word(word: u64) -> Self {
                let w = word.to_ne_bytes();
                const N: usize = std::mem::size_of::<$t>();
                let mut b = [0u8; N];
                b.copy_from_slice(&w[..N]);
                <$t>::from_ne_bytes(b)
            }
        }
    )*};
}

atomic_value! {
    i8 => Int8, u8 => Uint8, i16 => Int16, u16 => Uint16,
    i32 => Int32, u32 => Uint32, i64 => Int64, u64 => Uint64,
    f32 => Float, f64 => Double,
}

#[cfg(test)]
mod tests {
    use super::AtomicValue;

    #[test]
    fn words_round_trip_and_start_with_the_value() {
        assert_eq!(
            u64::from_word(0x1122_3344_5566_7788u64.to_word()),
            0x1122_3344_5566_7788
        );
        assert_eq!(i8::from_word((-5i8).to_word()), -5);
        assert_eq!(f64::from_word(2.5f64.to_word()), 2.5);
        assert_eq!(f32::from_word(1.25f32.to_word()), 1.25);
        let w = 0xabcdu16.to_word().to_ne_bytes();
        assert_eq!(&w[..2], &0xabcdu16.to_ne_bytes());
        assert_eq!(&w[2..], &[0; 6]);
    }
}
