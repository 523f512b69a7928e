//! The lock token: the random value stored under each key so that only its holder can extend or
//! release the lock.

use std::fmt;

use rand_core::CryptoRng;

use crate::error::ConfigError;

/// Random bytes in a generated token (the Redis page asks for 20 at least).
pub const TOKEN_ENTROPY_BYTES: usize = 24;
/// The longest caller-chosen token.
pub const MAX_TOKEN_LEN: usize = 512;

/// The 64 characters of a generated token: base64's letters and digits, then `_` and `.`.
/// Every one is URL-safe (RFC 3986 "unreserved") and none is `-`: a token that began with `-`
/// would be taken for an option by command lines (`redlock release deploy "$TOKEN"`), and
/// URL-safe base64 (`-_`) would start 1 token in 64 that way. The mapping is still one byte
/// pattern per character, so every generated token keeps all [`TOKEN_ENTROPY_BYTES`] of entropy.
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.";

/// The value a lock writes under its keys. Generated tokens are 24 bytes from the injected
/// CSPRNG, printed as 32 base64 characters from an alphabet of letters, digits, `_` and `.`
/// (URL-safe, and never a `-`, so a generated token never looks like a command-line option);
/// caller-chosen tokens are any 1 to [`MAX_TOKEN_LEN`] bytes. `Debug` shows only the length: a
/// token is a capability.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Token(Box<[u8]>);

impl Token {
    /// A fresh token from `rng` (which must be cryptographically secure: anyone who can guess a
    /// token can release the lock).
    pub fn generate<R: CryptoRng + ?Sized>(rng: &mut R) -> Self {
        let mut raw = [0u8; TOKEN_ENTROPY_BYTES];
        rng.fill_bytes(&mut raw);
        let mut text = Vec::with_capacity(TOKEN_ENTROPY_BYTES / 3 * 4);
        for chunk in raw.chunks_exact(3) {
            let n = u32::from(chunk[0]) << 16 | u32::from(chunk[1]) << 8 | u32::from(chunk[2]);
            for shift in [18, 12, 6, 0] {
                text.push(ALPHABET[(n >> shift & 63) as usize]);
            }
        }
        Self(text.into_boxed_slice())
    }

    /// A caller-chosen token (for example, one persisted to resume a lock after a restart).
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, ConfigError> {
        let bytes = bytes.into();
        if bytes.is_empty() || bytes.len() > MAX_TOKEN_LEN {
            return Err(ConfigError::TokenLength {
                len: bytes.len(),
                max: MAX_TOKEN_LEN,
            });
        }
        Ok(Self(bytes.into_boxed_slice()))
    }

    /// This token with the round number appended (`<token>.<round>`): distinct per round, and
    /// as unguessable as the token itself.
    /// The placeholder token of commands that claim nothing (the trust command).
    pub(crate) fn trust() -> Self {
        Self(b"trust".to_vec().into())
    }

    pub(crate) fn for_round(&self, round: u32) -> Self {
        let mut bytes = self.0.to_vec();
        bytes.push(b'.');
        bytes.extend_from_slice(round.to_string().as_bytes());
        Self(bytes.into_boxed_slice())
    }

    /// The bytes stored in Redis.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({} bytes)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rng;

    #[test]
    fn generated_tokens_are_printable_and_long_enough() {
        let mut seeded = rng(7);
        let a = Token::generate(&mut seeded);
        let b = Token::generate(&mut seeded);
        assert_eq!(a.as_bytes().len(), 32);
        assert!(a.as_bytes().iter().all(|c| ALPHABET.contains(c)));
        assert_ne!(a, b);
        assert_eq!(
            a,
            Token::generate(&mut rng(7)),
            "a seed reproduces its tokens"
        );
    }

    /// The first random byte `generate` would encode.
    fn first_byte<R: CryptoRng>(rng: &mut R) -> u8 {
        let mut raw = [0u8; TOKEN_ENTROPY_BYTES];
        rng.fill_bytes(&mut raw);
        raw[0]
    }

    #[test]
    fn a_generated_token_never_starts_with_a_hyphen() {
        // Seeds whose first 6 random bits are 62: URL-safe base64 would start those tokens
        // with `-` (1 in 64), which a command line takes for an option.
        let mut would_have_been_a_flag = 0;
        for seed in 0..2_000 {
            if first_byte(&mut rng(seed)) >> 2 == 62 {
                would_have_been_a_flag += 1;
            }
            let token = Token::generate(&mut rng(seed));
            assert_ne!(token.as_bytes()[0], b'-', "seed {seed}: {:?}", token.0);
            assert!(!token.as_bytes().contains(&b'-'), "seed {seed}");
            assert!(token.as_bytes().iter().all(|c| c.is_ascii_graphic()));
        }
        assert!(
            would_have_been_a_flag > 10,
            "the seeds cover the case: {would_have_been_a_flag}"
        );
    }

    #[test]
    fn the_encoding_keeps_every_bit_of_entropy() {
        // 64 distinct characters: 6 bits each, 32 of them = 24 bytes.
        let mut seen = ALPHABET.to_vec();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 64);
        assert!(!ALPHABET.contains(&b'-'));
        assert_eq!(TOKEN_ENTROPY_BYTES * 8, 32 * 6);
    }

    #[test]
    fn caller_tokens_are_bounded() {
        assert!(Token::new(b"x".to_vec()).is_ok());
        assert_eq!(
            Token::new(Vec::new()),
            Err(ConfigError::TokenLength {
                len: 0,
                max: MAX_TOKEN_LEN
            })
        );
        assert!(Token::new(vec![0u8; MAX_TOKEN_LEN]).is_ok());
        assert!(Token::new(vec![0u8; MAX_TOKEN_LEN + 1]).is_err());
    }

    #[test]
    fn debug_hides_the_value() {
        let token = Token::new(b"secret-value".to_vec()).expect("valid");
        assert_eq!(format!("{token:?}"), "Token(12 bytes)");
    }
}
