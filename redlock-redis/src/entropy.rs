//! The engine's RNG, seeded from the operating system.

use rand_core::SeedableRng;

use crate::error::Error;

/// A ChaCha20 CSPRNG seeded with 32 bytes of OS entropy, for one operation's tokens and jitter.
pub(crate) fn seeded_rng() -> Result<chacha20::ChaCha20Rng, Error> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|_| Error::Entropy)?;
    Ok(chacha20::ChaCha20Rng::from_seed(seed))
}
