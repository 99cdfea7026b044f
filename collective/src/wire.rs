//! What goes on the wire besides tensor bytes: the connection handshake and the per-call header.
//!
//! Both are fixed 32-byte little-endian records. Tensor bytes themselves travel raw, in the
//! host's byte order; the handshake refuses a peer whose byte order differs.

use super::error::{CallInfo, Op};

/// Size of both records.
pub(crate) const RECORD_LEN: usize = 32;

const HELLO_MAGIC: u32 = u32::from_le_bytes(*b"RTCH");
const HEADER_MAGIC: u32 = u32::from_le_bytes(*b"RTC1");
/// Bumped whenever the stream format changes.
pub(crate) const PROTOCOL_VERSION: u16 = 1;
/// Written in native order; a peer that reads it differently has another byte order.
const BYTE_ORDER_MARK: u16 = 0x0102;

/// Sent by both ends of a new connection: who I am and which group I belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) group_id: u64,
    pub world: u32,
    pub rank: u32,
}

/// Why a handshake record was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HelloError {
    NotRtune,
    Version(u16),
    ByteOrder,
}

impl std::fmt::Display for HelloError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HelloError::NotRtune => f.write_str("not an rtune collective connection (bad magic)"),
            HelloError::Version(v) => {
                write!(f, "protocol version {v}, expected {PROTOCOL_VERSION}")
            }
            HelloError::ByteOrder => f.write_str("peer has a different byte order"),
        }
    }
}

impl Hello {
    pub(crate) fn encode(&self) -> [u8; RECORD_LEN] {
        let mut b = [0u8; RECORD_LEN];
        b[0..4].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&BYTE_ORDER_MARK.to_ne_bytes());
        b[8..16].copy_from_slice(&self.group_id.to_le_bytes());
        b[16..20].copy_from_slice(&self.world.to_le_bytes());
        b[20..24].copy_from_slice(&self.rank.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; RECORD_LEN]) -> Result<Hello, HelloError> {
        if u32::from_le_bytes(b[0..4].try_into().unwrap()) != HELLO_MAGIC {
            return Err(HelloError::NotRtune);
        }
        let version = u16::from_le_bytes(b[4..6].try_into().unwrap());
        if version != PROTOCOL_VERSION {
            return Err(HelloError::Version(version));
        }
        if u16::from_ne_bytes(b[6..8].try_into().unwrap()) != BYTE_ORDER_MARK {
            return Err(HelloError::ByteOrder);
        }
        Ok(Hello {
            group_id: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            world: u32::from_le_bytes(b[16..20].try_into().unwrap()),
            rank: u32::from_le_bytes(b[20..24].try_into().unwrap()),
        })
    }
}

/// Layout of the per-call header:
///
/// | bytes  | field                                   |
/// |--------|-----------------------------------------|
/// | 0..4   | magic `RTC1`                            |
/// | 4      | op code                                 |
/// | 5      | lanes (ring directions, 1 or 2)         |
/// | 6..8   | reserved (0)                            |
/// | 8..16  | sequence number                         |
/// | 16..24 | length in elements                      |
/// | 24..28 | arg (root, or reduce op 1 sum / 2 avg)  |
/// | 28..32 | reserved (0)                            |
pub(crate) fn encode_header(call: &CallInfo) -> [u8; RECORD_LEN] {
    let mut b = [0u8; RECORD_LEN];
    b[0..4].copy_from_slice(&HEADER_MAGIC.to_le_bytes());
    b[4] = call.op.code();
    b[5] = call.lanes;
    b[8..16].copy_from_slice(&call.seq.to_le_bytes());
    b[16..24].copy_from_slice(&call.len.to_le_bytes());
    b[24..28].copy_from_slice(&call.arg.to_le_bytes());
    b
}

/// Decodes a header; `Err` says what is wrong with it.
pub(crate) fn decode_header(b: &[u8; RECORD_LEN]) -> Result<CallInfo, String> {
    let magic = u32::from_le_bytes(b[0..4].try_into().unwrap());
    if magic != HEADER_MAGIC {
        return Err(format!("expected a call header, got bytes {:02x?}", &b[..8]));
    }
    let op = Op::from_code(b[4]).ok_or_else(|| format!("unknown op code {}", b[4]))?;
    Ok(CallInfo {
        op,
        lanes: b[5],
        seq: u64::from_le_bytes(b[8..16].try_into().unwrap()),
        len: u64::from_le_bytes(b[16..24].try_into().unwrap()),
        arg: u32::from_le_bytes(b[24..28].try_into().unwrap()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips() {
        let h = Hello { group_id: 0xdead_beef_0123, world: 7, rank: 3 };
        assert_eq!(Hello::decode(&h.encode()), Ok(h));
    }

    #[test]
    fn hello_refuses_garbage() {
        assert_eq!(Hello::decode(&[b'G'; RECORD_LEN]), Err(HelloError::NotRtune));
        let mut b = Hello { group_id: 1, world: 2, rank: 0 }.encode();
        b[4] = 99;
        assert_eq!(Hello::decode(&b), Err(HelloError::Version(99)));
    }

    #[test]
    fn header_round_trips() {
        let c = CallInfo { op: Op::Broadcast, seq: 41, len: 1 << 40, arg: 3, lanes: 2 };
        assert_eq!(decode_header(&encode_header(&c)), Ok(c));
        assert!(decode_header(&[0; RECORD_LEN]).is_err());
    }
}
