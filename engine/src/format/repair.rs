//! Single-bit repair: the CRC algebra that lets recovery tell a bit flipped
//! at rest from a torn write. CRC-32C detects every single-bit error, and
//! it is linear, so the bit can also be located.

use super::record::{
    CRC_AT, CRC_COVERED_HEADER_BYTES, CRC_COVERS_FROM, HEADER_SIZE, Header, LEN_AT, crc32c,
};

/// The reflected CRC-32C polynomial.
const CRC32C_POLY: u32 = 0x82F6_3B78;

/// The CRC register's step over one zero byte, as a table: `(register >> 8)
/// ^ STEP[register & 0xff]`, and the inverse of the table's top bytes.
/// Each entry's top byte is distinct (the polynomial's top bit is set), so
/// one byte of the step runs backwards through one lookup.
const STEP: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut register = byte as u32;
        let mut bit = 0;
        while bit < 8 {
            register = if register & 1 != 0 {
                (register >> 1) ^ CRC32C_POLY
            } else {
                register >> 1
            };
            bit += 1;
        }
        table[byte] = register;
        byte += 1;
    }
    table
};

const STEP_BY_TOP_BYTE: [u8; 256] = {
    let mut inverse = [0u8; 256];
    let mut byte = 0;
    while byte < 256 {
        inverse[(STEP[byte] >> 24) as usize] = byte as u8;
        byte += 1;
    }
    inverse
};

/// The register one zero byte earlier: the step undone.
fn step_back(register: u32) -> u32 {
    let low = STEP_BY_TOP_BYTE[(register >> 24) as usize];
    ((register ^ STEP[low as usize]) << 8) | u32::from(low)
}

/// The record at the front of `bytes` with one bit flipped so that its CRC
/// matches, and which bit (from the record's start), if one flip does it.
///
/// A flip in the length field is found by trying the 32 candidates; a flip
/// in the CRC field by the stored and computed CRCs differing in one bit; a
/// flip in seq or payload by the CRC syndrome: the CRC is linear, so
/// `stored ^ computed` is the CRC (without init and xor-out) of a message
/// that is zero but for the flipped bit, which running the CRC register
/// backwards, a byte at a time, locates.
pub(crate) fn single_bit_repair(bytes: &[u8]) -> Option<(Vec<u8>, u64)> {
    let header = Header::peek(bytes)?;
    let message = &bytes[CRC_COVERS_FROM..];
    let crc_of = |payload_len: usize| crc32c(&message[..CRC_COVERED_HEADER_BYTES + payload_len]);
    let available = bytes.len() - HEADER_SIZE;
    let flipped = |len: usize, bit: usize| {
        let mut repaired = bytes[..HEADER_SIZE + len].to_vec();
        repaired[bit / 8] ^= 1 << (bit % 8);
        Some((repaired, bit as u64))
    };
    for bit in 0..32 {
        let candidate = (header.len ^ (1 << bit)) as usize;
        if candidate <= available && crc_of(candidate) == header.crc {
            return flipped(candidate, 8 * LEN_AT + bit);
        }
    }
    let len = header.len as usize;
    if len > available {
        return None;
    }
    let syndrome = header.crc ^ crc_of(len);
    if syndrome.count_ones() == 1 {
        return flipped(len, 8 * CRC_AT + syndrome.trailing_zeros() as usize);
    }
    // The message is seq and payload: m bytes, from CRC_COVERS_FROM. A
    // flip in its byte `m - k` leaves, k bytes of the step back, a
    // register that is that one bit of the byte.
    let message_len = CRC_COVERED_HEADER_BYTES + len;
    let mut register = syndrome;
    for back in 1..=message_len {
        register = step_back(register);
        if register < 0x100 && register.is_power_of_two() {
            let byte = CRC_COVERS_FROM + message_len - back;
            return flipped(len, 8 * byte + register.trailing_zeros() as usize);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Event, append_record, encode_batch};

    fn record(seq: u64, data_len: usize) -> Vec<u8> {
        let data: Vec<u8> = (0..data_len).map(|i| (i * 7 + 3) as u8).collect();
        let mut out = Vec::new();
        append_record(
            &mut out,
            seq,
            &encode_batch("stream", seq, &[Event::new("t", data)]),
        );
        out
    }

    /// A byte of the step run backwards through the table is eight bits
    /// of it run backwards one by one, for registers of every top byte.
    #[test]
    fn a_step_back_by_table_is_eight_bit_steps_back() {
        let bit_back = |register: u32| {
            if register & 0x8000_0000 != 0 {
                ((register ^ CRC32C_POLY) << 1) | 1
            } else {
                register << 1
            }
        };
        for top in 0..=255u32 {
            for low in [0, 1, 0x00ab_cdef, 0x0080_0001, 0x00ff_ffff] {
                let register = (top << 24) | low;
                let by_bits = (0..8).fold(register, |register, _| bit_back(register));
                assert_eq!(step_back(register), by_bits, "{register:#010x}");
            }
        }
    }

    /// Every single-bit flip of a record is located and undone exactly.
    #[test]
    fn single_bit_repair_finds_every_flip() {
        for data_len in [0, 1, 13, 200, 5000] {
            let clean = record(5, data_len);
            for bit in 0..clean.len() * 8 {
                let mut damaged = clean.clone();
                damaged[bit / 8] ^= 1 << (bit % 8);
                let (repaired, found) = single_bit_repair(&damaged)
                    .unwrap_or_else(|| panic!("bit {bit} of {data_len}"));
                assert_eq!(
                    (repaired, found),
                    (clean.clone(), bit as u64),
                    "data {data_len}, bit {bit}"
                );
            }
        }
    }

    /// Damage of more than one bit is not mistaken for a single flip (the
    /// chance is about 2^-29 per byte; these fixed cases must all say no).
    #[test]
    fn single_bit_repair_rejects_wider_damage() {
        let clean = record(9, 100);
        for first in (0..clean.len() * 8).step_by(7) {
            let mut damaged = clean.clone();
            damaged[first / 8] ^= 1 << (first % 8);
            let second = (first + 61) % (clean.len() * 8);
            damaged[second / 8] ^= 1 << (second % 8);
            if second != first {
                assert!(
                    single_bit_repair(&damaged).is_none(),
                    "bits {first} and {second}"
                );
            }
        }
        let mut torn = clean.clone();
        torn[60..].iter_mut().for_each(|byte| *byte = 0);
        assert!(single_bit_repair(&torn).is_none());
    }
}
