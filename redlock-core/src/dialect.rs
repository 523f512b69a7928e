//! What one node can run: the commands that decide which form each engine command takes there.
//!
//! A [`Command`](crate::Command) says what it means; [`Command::redis_form_on`] picks the
//! cheapest form that keeps that meaning on a node of a given [`Dialect`]. Adapters learn a
//! node's dialect when they connect, from `HELLO` (server name and version) and `COMMAND INFO`
//! (whether `DELIFEQ`, `DELEX` and `MSETEX` exist) — never from `INFO`'s `redis_version`,
//! which Valkey pins at 7.2.4 — and parse it with [`Dialect::detect`].
//!
//! | operation | scripts only (Redis 7, Valkey 8.0) | Valkey 9.x | Redis ≥ 8.4 |
//! |---|---|---|---|
//! | acquire, one key | `SET k t NX PX ttl` | same | same |
//! | acquire, several keys | [`ACQUIRE_SCRIPT`](crate::ACQUIRE_SCRIPT) | `MSETEX n k t … NX PX ttl` (≥ 9.1) | `MSETEX` |
//! | release | [`RELEASE_SCRIPT`](crate::RELEASE_SCRIPT) | `DELIFEQ k t` per key | `DELEX k IFEQ t` per key |
//! | extend, exact TTL safe | [`EXTEND_SCRIPT`](crate::EXTEND_SCRIPT) | `SET k t IFEQ t PX ttl` per key (≥ 8.1) | same |
//! | extend, otherwise | [`EXTEND_SCRIPT`](crate::EXTEND_SCRIPT) | same | same |
//! | extend, no scripting | `MULTI; PEXPIRE k ttl GT …; GET k …; EXEC` | exact: `SET … IFEQ`; else the same | same |
//!
//! | fenced acquire, no scripting (proven) | `MULTI; SET k t NX PX ttl; ZSCORE f fence; TIME; EXEC` | `MSETEX` for several keys | same |
//! | fence commit, no scripting | `MULTI; ZADD f GT fence fence; PEXPIRE f ret; GET k; EXEC` | same | same |
//!
//! Unproven restart-aware acquisitions keep their scripts, and so do releases where nothing
//! native deletes by value (Redis < 8.4) and multi-key acquisitions without `MSETEX`: a node
//! that cannot run scripts answers them with [`NodeErrorKind::NoSafeForm`](crate::NodeErrorKind)
//! instead of a weaker form (a connection that proved the node's memory acquires with a plain
//! `SET`, see [`MemoryWatch`](crate::MemoryWatch)). Trust there is `MSET`.

use crate::keyspace::Keyspace;

/// How a node deletes a key only if it holds a value, natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DeleteIfEq {
    /// No native command: the release script.
    #[default]
    None,
    /// `DELIFEQ key value` (Valkey ≥ 9.0).
    DelIfEq,
    /// `DELEX key IFEQ value` (Redis ≥ 8.4).
    DelEx,
}

/// What one node can run. The default is the oldest dialect the engine supports: scripts and
/// plain `SET`, nothing native.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dialect {
    /// Whether the node runs Lua scripts (`EVALSHA`). A Valkey ≥ 9 built without its Lua
    /// module does not; neither does a user denied `@scripting` (that one shows as `NOPERM`
    /// when a script is sent, not here).
    pub scripts: bool,
    /// Native compare-and-delete.
    pub delete_if_eq: DeleteIfEq,
    /// `SET key value IFEQ value PX ttl` (Valkey ≥ 8.1, Redis ≥ 8.4).
    pub set_if_eq: bool,
    /// `MSETEX numkeys key value … NX PX ttl`, all keys or none (Valkey ≥ 9.1, Redis ≥ 8.4).
    pub msetex: bool,
    /// Whether `SWAPDB` can run on the node (`COMMAND INFO` describes it, or did not answer):
    /// another database may then be swapped in under a proven connection, which hears nothing
    /// of it, so each vouched acquisition there is sealed ([`SealRead`](crate::SealRead)).
    /// False where the command is renamed away — or where the operator says, knowingly, that
    /// nothing ever swaps the node's databases.
    pub swapdb: bool,
    /// Whether this user may write a proof's marker
    /// ([`EPOCH_MARKER_PREFIX`](crate::EPOCH_MARKER_PREFIX)), as a `SET … XX` of one that
    /// never exists answered when the connection was made: an ACL without
    /// `~redlock:epoch:m:*` (or with it for reading only) refuses it, and proofs there write
    /// no marker (seals read the epoch and its stamp). Asked ahead because a refused marker
    /// would abort a native proof's transaction.
    pub markers: bool,
    /// The database the client selected on the node (a node URL's `/db`): what the node's
    /// identity is stamped with ([`node_identity`](crate::node_identity)).
    pub database: u32,
    /// How the node lays out its keys: on a cluster node every name beside a lock key lives in
    /// the key's slot ([`Keyspace::Cluster`]), a command's keys must share one slot
    /// ([`RedisForm::CrossSlot`](crate::RedisForm::CrossSlot) otherwise), and a connection
    /// proves its master's memory slot by slot ([`MemoryWatch`](crate::MemoryWatch)).
    pub keyspace: Keyspace,
    /// Whether the node, a cluster master, may drop the keys of a slot it loses (another
    /// master claimed it) without a tracking push: Redis (seen on 7.0.15; Valkey 8.1 and 9.1
    /// push). A proven connection there cannot hear its slot's memory go, so each vouched
    /// acquisition is sealed with a read of the slot's epoch (gone with the slot's keys).
    pub silent_slot_drops: bool,
}

impl Default for Dialect {
    fn default() -> Self {
        Self::SCRIPTS
    }
}

/// What `HELLO` and `COMMAND INFO` told about a node, for [`Dialect::detect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServerFacts<'a> {
    /// `HELLO`'s `server` (`redis`, `valkey`, …).
    pub server: &'a str,
    /// `HELLO`'s `version` (`7.0.15`, `9.1.2`, …).
    pub version: &'a str,
    /// Whether `HELLO`'s `modules` lists a module named `lua` (Valkey ≥ 9 loads Lua so).
    pub lua_module: bool,
    /// Whether `COMMAND INFO DELIFEQ` described the command.
    pub delifeq: bool,
    /// Whether `COMMAND INFO DELEX` described the command.
    pub delex: bool,
    /// Whether `COMMAND INFO MSETEX` described the command.
    pub msetex: bool,
    /// Whether `COMMAND INFO SWAPDB` described the command, or `COMMAND INFO` did not answer
    /// (taken as: it may run).
    pub swapdb: bool,
    /// Whether `HELLO`'s `mode` is `cluster`.
    pub cluster: bool,
}

impl Dialect {
    /// Scripts and plain commands only (Redis 6/7, Valkey 7/8.0, and any server not recognised).
    pub const SCRIPTS: Self = Self {
        scripts: true,
        delete_if_eq: DeleteIfEq::None,
        set_if_eq: false,
        msetex: false,
        swapdb: true,
        markers: true,
        database: 0,
        keyspace: Keyspace::Standalone,
        silent_slot_drops: false,
    };

    /// What a node of these facts can run. A version that does not parse counts as the oldest
    /// (nothing native by version); the commands `COMMAND INFO` found are used whatever the
    /// version says.
    pub fn detect(facts: &ServerFacts<'_>) -> Self {
        let version = parse_version(facts.version);
        let at_least = |min: (u32, u32)| version.is_some_and(|v| v >= min);
        let valkey = facts.server.eq_ignore_ascii_case("valkey");
        let redis = facts.server.eq_ignore_ascii_case("redis");
        let delete_if_eq = if facts.delifeq {
            DeleteIfEq::DelIfEq
        } else if facts.delex {
            DeleteIfEq::DelEx
        } else {
            DeleteIfEq::None
        };
        Self {
            // Valkey 9 moved Lua into a module a build may leave out; before 9 it is built in.
            scripts: !valkey || !at_least((9, 0)) || facts.lua_module,
            delete_if_eq,
            set_if_eq: (valkey && at_least((8, 1))) || (redis && at_least((8, 4))),
            msetex: facts.msetex,
            // A cluster node refuses `SWAPDB` ("not allowed in cluster mode": Redis 7, Valkey 9).
            swapdb: facts.swapdb && !facts.cluster,
            // Asked beside the facts (`EXISTS` of a marker): allowed unless refused.
            markers: true,
            database: 0,
            keyspace: if facts.cluster {
                Keyspace::Cluster
            } else {
                Keyspace::Standalone
            },
            // Whatever the version: no Redis release was seen to push (7.0.15 does not).
            silent_slot_drops: facts.cluster && !valkey,
        }
    }

    /// Whether the node can compare-and-delete without a script.
    pub fn native_release(&self) -> bool {
        self.delete_if_eq != DeleteIfEq::None
    }
}

/// `major.minor` of a version string such as `9.1.2` or `8.4.0-rc1`.
fn parse_version(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts
        .next()
        .map(|m| {
            let digits: String = m.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().unwrap_or(0)
        })
        .unwrap_or(0);
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(server: &'static str, version: &'static str) -> ServerFacts<'static> {
        ServerFacts {
            server,
            version,
            lua_module: false,
            swapdb: true,
            ..ServerFacts::default()
        }
    }

    #[test]
    fn redis_7_runs_scripts_only() {
        assert_eq!(Dialect::detect(&facts("redis", "7.0.15")), Dialect::SCRIPTS);
    }

    #[test]
    fn valkey_9_1_with_lua_has_every_native_form() {
        let found = Dialect::detect(&ServerFacts {
            lua_module: true,
            delifeq: true,
            msetex: true,
            ..facts("valkey", "9.1.2")
        });
        assert_eq!(
            found,
            Dialect {
                scripts: true,
                delete_if_eq: DeleteIfEq::DelIfEq,
                set_if_eq: true,
                msetex: true,
                swapdb: true,
                markers: true,
                database: 0,
                keyspace: Keyspace::Standalone,
                silent_slot_drops: false,
            }
        );
    }

    #[test]
    fn a_cluster_node_cannot_swap_and_a_redis_one_drops_slots_silently() {
        for (server, version, silent) in [("redis", "7.0.15", true), ("valkey", "9.1.2", false)] {
            let found = Dialect::detect(&ServerFacts {
                cluster: true,
                ..facts(server, version)
            });
            assert_eq!(found.keyspace, Keyspace::Cluster);
            assert!(!found.swapdb, "{server}: SWAPDB is refused in cluster mode");
            assert_eq!(found.silent_slot_drops, silent, "{server}");
            let standalone = Dialect::detect(&facts(server, version));
            assert!(
                standalone.swapdb && !standalone.silent_slot_drops,
                "{server}"
            );
        }
    }

    #[test]
    fn valkey_9_without_its_lua_module_runs_no_script() {
        let found = Dialect::detect(&ServerFacts {
            delifeq: true,
            ..facts("valkey", "9.0.0")
        });
        assert!(!found.scripts);
        assert!(found.native_release());
    }

    #[test]
    fn valkey_8_has_lua_built_in_and_set_ifeq_from_8_1() {
        let v80 = Dialect::detect(&facts("valkey", "8.0.2"));
        let v81 = Dialect::detect(&facts("valkey", "8.1.8"));
        assert!(v80.scripts && v81.scripts);
        assert!(!v80.set_if_eq);
        assert!(v81.set_if_eq);
    }

    #[test]
    fn redis_8_4_uses_delex_and_set_ifeq() {
        let found = Dialect::detect(&ServerFacts {
            delex: true,
            msetex: true,
            ..facts("redis", "8.4.0")
        });
        assert_eq!(found.delete_if_eq, DeleteIfEq::DelEx);
        assert!(found.set_if_eq && found.msetex && found.scripts);
        assert!(!Dialect::detect(&facts("redis", "8.2.1")).set_if_eq);
    }

    #[test]
    fn a_node_whose_swapdb_is_renamed_away_cannot_swap() {
        let renamed = Dialect::detect(&ServerFacts {
            swapdb: false,
            ..facts("redis", "7.0.15")
        });
        assert!(!renamed.swapdb);
        assert!(Dialect::detect(&facts("redis", "7.0.15")).swapdb);
    }

    #[test]
    fn unknown_servers_and_versions_get_nothing_by_version() {
        assert_eq!(Dialect::detect(&facts("keydb", "9.9.9")), Dialect::SCRIPTS);
        assert_eq!(
            Dialect::detect(&facts("valkey", "garbage")),
            Dialect::SCRIPTS
        );
        assert_eq!(parse_version("8.4.0-rc1"), Some((8, 4)));
        assert_eq!(parse_version("10"), Some((10, 0)));
        assert_eq!(parse_version(""), None);
    }
}
