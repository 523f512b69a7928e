//! Learning a node's [`Dialect`] when its connection is made: `HELLO` (no arguments: the
//! connection's protocol stays as it is) for the server's name, version and modules, and
//! `COMMAND INFO DELIFEQ DELEX MSETEX SWAPDB` for the native commands it has and whether it can
//! swap databases. Never `INFO`'s `redis_version`, which Valkey pins at 7.2.4.
//!
//! Whether the connection may run scripts at all is asked too, with `SCRIPT EXISTS` (the
//! `@scripting` category): an ACL that denies it, or a server without Lua, answers with an
//! error, and the node then gets the native forms only ([`Dialect::scripts`] false). So is
//! whether it may write the proofs' markers (`SET redlock:epoch:m:0 1 PX 1 XX`, which writes
//! nothing: no proof's marker has that name; an ACL may deny the key pattern, or allow it for
//! reading only: `NOPERM`, [`Dialect::markers`] false).
//!
//! A node that answers neither `HELLO` nor `COMMAND INFO` (an old server, an ACL that denies
//! them) is taken to run scripts and nothing native ([`Dialect::SCRIPTS`]): every operation
//! then keeps its script form, which any server with scripting runs.
//!
//! The `SCRIPT EXISTS` asks about the engine's own scripts; where scripts may run and the node
//! lacks some of them, a second pipeline loads those (`SCRIPT LOAD`) before the connection
//! carries any batch, so that no batch on it meets `NOSCRIPT` unless the node's scripts are
//! flushed later. A node that has them all (any node a client used before, until it restarts)
//! costs no second round trip; one that may not run scripts is sent no load (no refusals in its
//! ACL log and error counts beyond the `SCRIPT EXISTS` that found out).

use redis::Value;
use redlock_core::{Dialect, ServerFacts};

use crate::request::SCRIPTS;

/// The commands whose presence `COMMAND INFO` is asked about, in this order: the native forms,
/// and `SWAPDB` (renamed away, no database can be swapped under a proven connection).
const NATIVE: [&str; 4] = ["DELIFEQ", "DELEX", "MSETEX", "SWAPDB"];

/// The one pipeline that asks: `HELLO`, `COMMAND INFO` of the native commands, whether
/// scripts may run and which of the engine's the node has (`SCRIPT EXISTS` of their hashes, in
/// [`SCRIPTS`] order), and whether markers may be written (`SET … XX` of a marker no proof
/// writes: a write that never happens).
fn probe() -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe.cmd("HELLO");
    pipe.cmd("COMMAND").arg("INFO").arg(&NATIVE[..]);
    let exists = pipe.cmd("SCRIPT").arg("EXISTS");
    for script in SCRIPTS {
        exists.arg(crate::request::script_hash(script));
    }
    pipe.cmd("SET")
        .arg("redlock:epoch:m:0")
        .arg(1)
        .arg("PX")
        .arg(1)
        .arg("XX");
    pipe
}

/// The pipeline that loads the engine's scripts the node lacks, as [`probe`]'s `SCRIPT EXISTS`
/// answered (`values`), where scripts may run (`dialect`); `None` when there is nothing to
/// load. Sent before the connection carries any batch: a script that meets `NOSCRIPT` is loaded
/// and run again after whatever was written on the shared connection meanwhile, so a later
/// round of another lock could overtake it (and be refused where a release had not run yet);
/// with the scripts loaded, normally only a flush of the node's scripts brings that back. An
/// answer of another shape loads them all. A load the node refuses (an ACL that allows
/// `EVALSHA` but not `SCRIPT LOAD`) changes nothing: such a request then fails as it did
/// before.
fn loads(values: &[Value], dialect: &Dialect) -> Option<redis::Pipeline> {
    if !dialect.scripts {
        return None;
    }
    let has = match values.get(2) {
        Some(Value::Array(has)) if has.len() == SCRIPTS.len() => has.as_slice(),
        _ => &[],
    };
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for (at, script) in SCRIPTS.into_iter().enumerate() {
        if !matches!(has.get(at), Some(Value::Int(1))) {
            pipe.cmd("SCRIPT").arg("LOAD").arg(script.source());
        }
    }
    (!pipe.is_empty()).then_some(pipe)
}

/// Asks a blocking connection's node what it can run, and loads the scripts where they may
/// run and the node lacks ([`loads`]). An error means the node did not
/// answer at all (the connection is not usable); a node that answers with errors runs
/// [`Dialect::SCRIPTS`].
#[cfg(feature = "blocking")]
pub(crate) fn detect(conn: &mut dyn redis::ConnectionLike) -> Result<Dialect, redis::RedisError> {
    let values = probe().query::<Vec<Value>>(conn)?;
    answerable(&values)?;
    let dialect = from_replies(&values);
    if let Some(loads) = loads(&values, &dialect) {
        answerable(&loads.query::<Vec<Value>>(conn)?)?;
    }
    Ok(dialect)
}

/// [`detect`] on an async connection.
#[cfg(any(feature = "tokio", feature = "smol"))]
pub(crate) async fn detect_async<C: redis::aio::ConnectionLike>(
    conn: &mut C,
) -> Result<Dialect, redis::RedisError> {
    let values = probe().query_async::<Vec<Value>>(conn).await?;
    answerable(&values)?;
    let dialect = from_replies(&values);
    if let Some(loads) = loads(&values, &dialect) {
        answerable(&loads.query_async::<Vec<Value>>(conn).await?)?;
    }
    Ok(dialect)
}

/// A node that is busy running a script or still loading its dataset answers every command
/// with that error, and what it answers now says nothing of what it can run: the connection
/// fails as the node does (a later one asks again).
fn answerable(values: &[Value]) -> Result<(), redis::RedisError> {
    for value in values {
        if let Value::ServerError(err) = value
            && matches!(err.code(), "BUSY" | "LOADING")
        {
            return Err(err.clone().into());
        }
    }
    Ok(())
}

/// The dialect of the replies to [`probe`]: `[HELLO's, COMMAND INFO's, SCRIPT EXISTS's,
/// SET's]` (without the last: markers allowed, as a proof by script finds out anyway).
pub(crate) fn from_replies(values: &[Value]) -> Dialect {
    let [hello, info, scripting, markers @ ..] = values else {
        return Dialect::SCRIPTS;
    };
    let mut dialect = from_hello(hello, info);
    // Denied by an ACL (`NOPERM`), or no such command (no Lua): no script will run.
    if let Value::ServerError(err) = scripting
        && matches!(err.code(), "NOPERM" | "ERR")
    {
        dialect.scripts = false;
    }
    // Refused by an ACL (no `~redlock:epoch:m:*`, or `%R~` only): proofs write no marker.
    // Another error (`OOM`, `READONLY` on a replica) says nothing of the ACL.
    if let [Value::ServerError(err)] = markers
        && err.code() == "NOPERM"
    {
        dialect.markers = false;
    }
    dialect
}

fn from_hello(hello: &Value, info: &Value) -> Dialect {
    let field = |name: &str| {
        pairs(hello)
            .find(|(k, _)| text(k) == Some(name))
            .map(|(_, v)| v)
    };
    let (Some(server), Some(version)) = (
        field("server").and_then(text),
        field("version").and_then(text),
    ) else {
        return Dialect::SCRIPTS;
    };
    let lua_module = field("modules").is_some_and(|modules| {
        items(modules).any(|module| {
            pairs(module).any(|(k, v)| text(k) == Some("name") && text(v) == Some("lua"))
        })
    });
    let found: Option<Vec<bool>> = match info {
        Value::Array(entries) => Some(entries.iter().map(|e| !matches!(e, Value::Nil)).collect()),
        _ => None,
    };
    // Unasked is not absent: a node that did not answer may swap.
    let swapdb = found
        .as_ref()
        .is_none_or(|found| found.get(3) != Some(&false));
    let found = found.unwrap_or_default();
    let has = |i: usize| found.get(i).copied().unwrap_or(false);
    Dialect::detect(&ServerFacts {
        server,
        version,
        lua_module,
        delifeq: has(0),
        delex: has(1),
        msetex: has(2),
        swapdb,
        cluster: field("mode").and_then(text) == Some("cluster"),
    })
}

/// The key/value pairs of a map (RESP3) or of a flat array of alternating keys and values
/// (RESP2).
fn pairs(value: &Value) -> Box<dyn Iterator<Item = (&Value, &Value)> + '_> {
    match value {
        Value::Map(pairs) => Box::new(pairs.iter().map(|(k, v)| (k, v))),
        Value::Array(flat) => Box::new(flat.chunks_exact(2).map(|kv| (&kv[0], &kv[1]))),
        _ => Box::new(std::iter::empty()),
    }
}

fn items(value: &Value) -> impl Iterator<Item = &Value> {
    match value {
        Value::Array(items) | Value::Set(items) => items.iter(),
        _ => [].iter(),
    }
}

fn text(value: &Value) -> Option<&str> {
    match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        Value::SimpleString(s) => Some(s),
        Value::VerbatimString { text, .. } => Some(text),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redlock_core::DeleteIfEq;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    /// `HELLO`'s answer as a RESP2 connection gets it: a flat array.
    fn hello(server: &str, version: &str, modules: Vec<Value>) -> Value {
        Value::Array(vec![
            bulk("server"),
            bulk(server),
            bulk("version"),
            bulk(version),
            bulk("proto"),
            Value::Int(2),
            bulk("modules"),
            Value::Array(modules),
        ])
    }

    fn allowed() -> Value {
        Value::Array(vec![Value::Int(0)])
    }

    fn error(code: &str) -> Value {
        redis::parse_redis_value(format!("-{code} denied\r\n").as_bytes()).expect("an error reply")
    }

    fn info<const N: usize>(found: [bool; N]) -> Value {
        Value::Array(
            found
                .iter()
                .map(|f| {
                    if *f {
                        Value::Array(vec![bulk("x")])
                    } else {
                        Value::Nil
                    }
                })
                .collect(),
        )
    }

    #[test]
    fn valkey_9_1_as_it_answers() {
        let lua = Value::Map(vec![
            (bulk("name"), bulk("lua")),
            (bulk("ver"), Value::Int(1)),
        ]);
        let dialect = from_replies(&[
            hello("valkey", "9.1.2", vec![lua]),
            info([true, false, true]),
            allowed(),
        ]);
        assert!(dialect.scripts && dialect.set_if_eq && dialect.msetex);
        assert_eq!(dialect.delete_if_eq, DeleteIfEq::DelIfEq);
    }

    #[test]
    fn a_cluster_node_is_told_by_hellos_mode() {
        let mode = |mode: &str| {
            let Value::Array(mut fields) = hello("redis", "7.0.15", vec![]) else {
                unreachable!("hello() is an array")
            };
            fields.extend([bulk("mode"), bulk(mode)]);
            from_replies(&[Value::Array(fields), info([false; 4]), allowed()]).keyspace
        };
        assert_eq!(mode("cluster"), redlock_core::Keyspace::Cluster);
        assert_eq!(mode("standalone"), redlock_core::Keyspace::Standalone);
        assert_eq!(mode("sentinel"), redlock_core::Keyspace::Standalone);
    }

    #[test]
    fn valkey_9_without_lua_and_redis_7_as_they_answer() {
        let no_lua = from_replies(&[
            hello("valkey", "9.1.2", vec![]),
            info([true, false, true]),
            allowed(),
        ]);
        assert!(!no_lua.scripts);
        let resp3 = Value::Map(vec![
            (bulk("server"), bulk("redis")),
            (bulk("version"), bulk("7.0.15")),
        ]);
        assert_eq!(
            from_replies(&[resp3.clone(), info([false; 3]), allowed()]),
            Dialect::SCRIPTS
        );
        // An ACL user denied `@scripting`: native forms only.
        let denied = from_replies(&[resp3.clone(), info([false; 3]), error("NOPERM")]);
        assert!(!denied.scripts);
        // One denied the markers' keys: proofs write none.
        let allowed_markers = Value::Nil;
        let replies = [resp3.clone(), info([false; 3]), allowed(), allowed_markers];
        assert!(from_replies(&replies).markers);
        let unmarked = from_replies(&[resp3, info([false; 3]), allowed(), error("NOPERM")]);
        assert!(!unmarked.markers && unmarked.scripts);
    }

    #[test]
    fn only_the_scripts_a_node_lacks_are_loaded_and_only_where_scripts_may_run() {
        let exists = |has: [i64; SCRIPTS.len()]| {
            let has = has.into_iter().map(Value::Int).collect();
            [Value::Nil, Value::Nil, Value::Array(has)]
        };
        let sources = |pipe: &redis::Pipeline| {
            let packed = pipe.get_packed_pipeline();
            SCRIPTS.map(|script| {
                packed
                    .windows(script.source().len())
                    .any(|window| window == script.source().as_bytes())
            })
        };
        let scripts = Dialect::SCRIPTS;
        // A node that has them all: no second round trip.
        assert!(loads(&exists([1; SCRIPTS.len()]), &scripts).is_none());
        // A fresh node: every script.
        let all = loads(&exists([0; SCRIPTS.len()]), &scripts).expect("loads");
        assert_eq!(all.len(), SCRIPTS.len());
        assert!(sources(&all).iter().all(|sent| *sent));
        // Some missing (the release and the fenced acquire): those two only.
        let mut has = [1; SCRIPTS.len()];
        has[1] = 0;
        has[5] = 0;
        let some = loads(&exists(has), &scripts).expect("loads");
        assert_eq!(some.len(), 2);
        assert_eq!(sources(&some).map(|sent| !sent), has.map(|has| has == 1));
        // An answer of another shape: all of them.
        let odd = [Value::Nil, Value::Nil, Value::Array(vec![Value::Int(1)])];
        assert_eq!(
            loads(&odd, &scripts).map(|pipe| pipe.len()),
            Some(SCRIPTS.len())
        );
        // Scripts may not run: nothing, whatever the node has.
        let native = Dialect {
            scripts: false,
            ..Dialect::SCRIPTS
        };
        assert!(loads(&exists([0; SCRIPTS.len()]), &native).is_none());
    }

    #[test]
    fn swapdb_renamed_away_is_seen_and_an_unanswered_one_may_swap() {
        let hello = || hello("redis", "7.0.15", vec![]);
        let renamed = from_replies(&[hello(), info([false, false, false, false]), allowed()]);
        assert!(!renamed.swapdb);
        let there = from_replies(&[hello(), info([false, false, false, true]), allowed()]);
        assert!(there.swapdb);
        assert!(from_replies(&[hello(), error("NOPERM"), allowed()]).swapdb);
    }

    #[test]
    fn errors_and_odd_answers_mean_scripts_only() {
        assert_eq!(
            from_replies(&[Value::Nil, Value::Nil, allowed()]),
            Dialect::SCRIPTS
        );
        assert_eq!(from_replies(&[]), Dialect::SCRIPTS);
        assert_eq!(
            from_replies(&[hello("redis", "7.0.15", vec![]), Value::Int(3), allowed()]),
            Dialect::SCRIPTS
        );
    }
}
