use std::time::{Duration, Instant};

use rand_core::SeedableRng;
use redlock_core::{
    Batch, Command, Config, DeleteIfEq, Dialect, FENCE_MEMBER, FENCE_RETENTION_MS, Keyspace,
    LockId, LockRequest, Multiplexer, Op, Reply, Start,
};

use super::*;

/// A one-node engine that started lock 1 as `start` of `request`, and its first batch.
fn started(
    start: Start,
    request: &LockRequest,
    restart_aware: bool,
) -> (Multiplexer<chacha20::ChaCha20Rng>, Batch) {
    let config = Config::builder(1)
        .restart_aware(restart_aware)
        .build()
        .expect("config");
    let mut mux = Multiplexer::new(config, chacha20::ChaCha20Rng::seed_from_u64(7));
    mux.start(Instant::now(), LockId::new(1), start, request)
        .expect("starts");
    let batch = mux.poll_transmit().expect("a batch");
    (mux, batch)
}

/// The commands the engine sends one node for `start` of `request`: its first batch's.
fn commands(start: Start, request: &LockRequest, restart_aware: bool) -> Vec<Command> {
    let (_, batch) = started(start, request, restart_aware);
    batch.transmits.into_iter().map(|t| t.command).collect()
}

/// The command the engine sends its one node once the acquisition of `request` was answered
/// `reply` and `then` ran: an extension of the lock acquired (`then` extends it), or the
/// commit of a fence (`then` does nothing).
fn command_after(
    request: &LockRequest,
    reply: Reply,
    then: impl FnOnce(&mut Multiplexer<chacha20::ChaCha20Rng>, LockId),
) -> Command {
    let (mut mux, first) = started(Start::Acquire, request, false);
    for transmit in first.transmits {
        mux.handle_reply(Instant::now(), transmit.id, reply);
    }
    then(&mut mux, LockId::new(1));
    let next = mux.poll_transmit().expect("a second batch");
    let mut commands = next.transmits.into_iter().map(|t| t.command);
    commands.next().expect("a command")
}

/// An extension of `request`'s lock once acquired, as the engine sends it, and the same with
/// the exact TTL marked safe (the native form that sets it).
fn extensions(request: &LockRequest) -> [Command; 2] {
    let extend = |mux: &mut Multiplexer<_>, id| {
        let ttl = Duration::from_secs(20);
        mux.extend(Instant::now(), id, ttl).expect("extends");
    };
    let extension = command_after(request, Reply::Ok, extend);
    assert_eq!(extension.op(), Op::ExpireIfEquals, "{extension:?}");
    let mut exact = extension.clone();
    exact.force_exact_ttl_for_tests();
    [extension, exact]
}

/// The commit of the fence a fenced acquisition of `request` was answered.
fn commit(request: &LockRequest) -> Command {
    let commit = command_after(&request.clone().fenced(), Reply::Int(42), |_, _| {});
    assert_eq!(commit.op(), Op::CommitFence, "{commit:?}");
    commit
}

/// Acquisitions, fenced ones, releases by token, extensions and fence commits, of one key or
/// several, keys of which one is a prefix of another (a channel argument written in pieces
/// must end where the other's does).
fn every_command() -> Vec<Command> {
    let ttl = Duration::from_secs(10);
    let mut all = Vec::new();
    // Keys, tokens and TTLs alike in length and unlike in content, and unlike in length.
    for resource in ["lock", "lock2", "lack", "{tag}lock"] {
        for token in ["token-a", "token-b", "token-ab"] {
            let plain = LockRequest::new(resource, ttl).token(token);
            let many = plain.clone().resource(format!("{resource}:other"));
            for request in [plain, many] {
                for restart_aware in [false, true] {
                    all.extend(commands(Start::Acquire, &request, restart_aware));
                    let fenced = request.clone().fenced();
                    all.extend(commands(Start::Acquire, &fenced, restart_aware));
                }
                all.extend(commands(Start::ReleaseByToken, &request, false));
                all.extend(extensions(&request));
                all.push(commit(&request));
            }
        }
    }
    for ttl_ms in [1500, 20_000] {
        let ttl = Duration::from_millis(ttl_ms);
        let request = LockRequest::new("lock", ttl).token("token-a");
        all.extend(commands(Start::Acquire, &request, false));
    }
    all
}

fn dialects() -> Vec<Dialect> {
    let native = Dialect {
        delete_if_eq: DeleteIfEq::DelIfEq,
        set_if_eq: true,
        msetex: true,
        ..Dialect::SCRIPTS
    };
    let delex = Dialect {
        delete_if_eq: DeleteIfEq::DelEx,
        ..native
    };
    let mut all = Vec::new();
    for dialect in [Dialect::SCRIPTS, native, delex] {
        for scripts in [true, false] {
            for keyspace in [Keyspace::Standalone, Keyspace::Cluster] {
                all.push(Dialect {
                    scripts,
                    keyspace,
                    ..dialect
                });
            }
        }
    }
    all
}

/// Every part of every form of every command on every dialect, with its packed bytes.
fn every_part<'c>(commands: &'c [Command]) -> Vec<(RedisForm<'c>, usize, Vec<u8>)> {
    let mut parts = Vec::new();
    let mut forms_seen = Vec::new();
    for command in commands {
        for dialect in dialects() {
            let forms = [
                command.redis_form_on(&dialect),
                command.redis_form_vouched(&dialect),
            ];
            for form in forms {
                for part in 0..form.parts() {
                    let packed = part_cmd(&form, part).get_packed_command();
                    // One of each form and part: the same form of another dialect adds nothing.
                    let seen = format!("{form:?} {part}");
                    if !forms_seen.contains(&seen) {
                        forms_seen.push(seen);
                        parts.push((form, part, packed));
                    }
                }
            }
        }
    }
    parts
}

/// What the forms that carry a round's command are sent as, built argument by argument here
/// (independently of [`write_part`]): a plain `SET`, a script call, a compare-and-delete and its
/// notice, `MSETEX`, a fenced acquisition's parts, both native extensions' parts and a fence
/// commit's.
#[test]
fn the_one_encoding_sends_each_form_as_its_command() {
    let commands = every_command();
    let parts = every_part(&commands);
    let (mut sets, mut scripts, mut deletes, mut notices) = (0, 0, 0, 0);
    let (mut msetexes, mut fenced) = (0, 0);
    let (mut set_if_eqs, mut expire_gts, mut commits) = (0, 0, 0);
    for (form, part, packed) in &parts {
        let mut expected = redis::Cmd::new();
        match *form {
            RedisForm::Set { key, token, ttl_ms } => {
                sets += 1;
                expected
                    .arg("SET")
                    .arg(key)
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl_ms);
            }
            RedisForm::Script { script, keys, args } => {
                scripts += 1;
                expected
                    .arg("EVALSHA")
                    .arg(crate::request::script_hash(script))
                    .arg(keys.len());
                keys.for_each(|key| {
                    expected.arg(key);
                });
                expected.arg(args.token);
                for number in args.numbers() {
                    expected.arg(number);
                }
                if let Some(tag) = args.tag() {
                    expected.arg(tag);
                }
            }
            RedisForm::DeleteEach {
                spec,
                how,
                keyspace,
                ..
            } => match spec.keys().nth(*part) {
                Some(key) => {
                    deletes += 1;
                    let token = spec.token().as_bytes();
                    match how {
                        DeleteIfEq::DelEx => expected.arg("DELEX").arg(key).arg("IFEQ").arg(token),
                        _ => expected.arg("DELIFEQ").arg(key).arg(token),
                    };
                }
                None => {
                    notices += 1;
                    let key = spec.keys().nth(part - spec.len()).expect("a key");
                    let publish = match keyspace {
                        Keyspace::Cluster => "SPUBLISH",
                        _ => "PUBLISH",
                    };
                    expected
                        .arg(publish)
                        .arg(keyspace.released_channel(key))
                        .arg(1);
                }
            },
            RedisForm::MSetEx { spec, ttl_ms } => {
                msetexes += 1;
                msetex(&mut expected, spec, ttl_ms);
            }
            RedisForm::FencedSet {
                spec,
                ttl_ms,
                keyspace,
            } => {
                fenced += 1;
                match *part {
                    0 if spec.len() == 1 => {
                        let key = spec.keys().next().expect("a key");
                        let token = spec.token().as_bytes();
                        expected.arg("SET").arg(key).arg(token).arg("NX").arg("PX");
                        expected.arg(ttl_ms);
                    }
                    0 => msetex(&mut expected, spec, ttl_ms),
                    at if at <= spec.len() => {
                        let key = spec.keys().nth(at - 1).expect("a key");
                        let counter = keyspace.fence_key(key);
                        expected.arg("ZSCORE").arg(counter).arg(FENCE_MEMBER);
                    }
                    _ => {
                        expected.arg("TIME");
                    }
                }
            }
            RedisForm::SetIfEqEach { spec, ttl_ms } => {
                set_if_eqs += 1;
                let key = spec.keys().nth(*part).expect("a key per part");
                let token = spec.token().as_bytes();
                expected
                    .arg("SET")
                    .arg(key)
                    .arg(token)
                    .arg("IFEQ")
                    .arg(token);
                expected.arg("PX").arg(ttl_ms);
            }
            RedisForm::ExpireGtEach { spec, ttl_ms } => {
                expire_gts += 1;
                // One `PEXPIRE … GT` per key, then one `GET` per key.
                match spec.keys().nth(*part) {
                    Some(key) => expected.arg("PEXPIRE").arg(key).arg(ttl_ms).arg("GT"),
                    None => {
                        let key = spec.keys().nth(part - spec.len()).expect("a key");
                        expected.arg("GET").arg(key)
                    }
                };
            }
            RedisForm::CommitFenceEach {
                spec,
                fence,
                keyspace,
            } => {
                commits += 1;
                // Per key, its counter raised to the fence and kept for the retention; then
                // one `GET` per lock key.
                let n = spec.len();
                match spec.keys().nth(part / 2) {
                    Some(key) if *part < 2 * n && part.is_multiple_of(2) => {
                        let counter = keyspace.fence_key(key);
                        expected.arg("ZADD").arg(counter).arg("GT").arg(fence);
                        expected.arg(FENCE_MEMBER);
                    }
                    Some(key) if *part < 2 * n => {
                        let counter = keyspace.fence_key(key);
                        expected.arg("PEXPIRE").arg(counter).arg(FENCE_RETENTION_MS);
                    }
                    _ => {
                        let key = spec.keys().nth(part - 2 * n).expect("a key");
                        expected.arg("GET").arg(key);
                    }
                }
            }
            _ => continue,
        }
        assert_eq!(
            String::from_utf8_lossy(packed),
            String::from_utf8_lossy(&expected.get_packed_command()),
            "{form:?} part {part}"
        );
    }
    assert!(sets > 0 && scripts > 0 && deletes > 0 && notices > 0);
    assert!(msetexes > 0 && fenced > 0);
    assert!(set_if_eqs > 0 && expire_gts > 0 && commits > 0);
}

/// `MSETEX n key token … NX PX ttl_ms`, argument by argument.
fn msetex(expected: &mut redis::Cmd, spec: &redlock_core::LockSpec, ttl_ms: u64) {
    expected.arg("MSETEX").arg(spec.len());
    for key in spec.keys() {
        expected.arg(key).arg(spec.token().as_bytes());
    }
    expected.arg("NX").arg("PX").arg(ttl_ms);
}

#[test]
fn a_form_encodes_to_a_command_exactly_when_its_bytes_are_the_same() {
    let commands = every_command();
    let parts = every_part(&commands);
    let written = |name: &[u8]| {
        parts
            .iter()
            .any(|(_, _, packed)| packed.windows(name.len()).any(|w| w == name))
    };
    // The forms cover what a node is sent: scripts, plain and native commands, notices
    // (a channel written in pieces), fence counters, transactions' parts, native extensions
    // and fence commits.
    for name in [
        &b"EVALSHA"[..],
        b"$2\r\nNX\r\n",
        b"MSETEX",
        b"DELIFEQ",
        b"DELEX",
        b"PUBLISH",
        b"SPUBLISH",
        b"ZSCORE",
        b"IFEQ",
        b"ZADD",
        b"$2\r\nGT\r\n",
    ] {
        assert!(
            written(name),
            "no form writes {}",
            String::from_utf8_lossy(name)
        );
    }
    let mut shared = 0;
    for (form, part, packed) in &parts {
        let cmd = part_cmd(form, *part);
        // What a blocking client's workers compare with: the same, packed.
        #[cfg(feature = "blocking")]
        let pack = resp::pack(form, *part);
        assert!(
            encodes_to(form, *part, &cmd),
            "{form:?} part {part} and its own command"
        );
        #[cfg(feature = "blocking")]
        assert!(
            encodes_to_packed(form, *part, &pack),
            "{form:?} part {part} packed"
        );
        for (other, other_part, other_packed) in &parts {
            let same = packed == other_packed;
            shared += usize::from(same);
            assert_eq!(
                encodes_to(other, *other_part, &cmd),
                same,
                "{other:?} part {other_part} against {form:?} part {part}"
            );
            #[cfg(feature = "blocking")]
            assert_eq!(
                encodes_to_packed(other, *other_part, &pack),
                same,
                "{other:?} part {other_part} against {form:?} part {part} packed"
            );
        }
    }
    assert!(shared > parts.len(), "some different forms encode alike");
    eprintln!("{} parts, {shared} pairs alike", parts.len());
}

#[cfg(any(feature = "tokio", feature = "smol"))]
#[test]
fn a_thread_hands_out_its_last_command_again_only_for_the_same_bytes() {
    let commands = every_command();
    let parts = every_part(&commands);
    for (form, part, packed) in &parts {
        let first = part_cmd_shared(form, *part);
        let again = part_cmd_shared(form, *part);
        assert!(
            Arc::ptr_eq(&first, &again),
            "{form:?} part {part} encoded twice"
        );
        assert_eq!(&again.get_packed_command(), packed);
        // Once no write holds it, nothing keeps it (nor its key and token).
        let gone = Arc::downgrade(&first);
        drop((first, again));
        assert!(
            gone.upgrade().is_none(),
            "{form:?} part {part} outlived its writes"
        );
    }
    shared_exactly_when_alike(
        &keyed(&parts),
        |(form, part)| part_cmd_shared(form, *part),
        redis::Cmd::get_packed_command,
    );
}

/// Each part keyed by what it is, with its packed bytes.
fn keyed<'c>(parts: &[(RedisForm<'c>, usize, Vec<u8>)]) -> Vec<((RedisForm<'c>, usize), Vec<u8>)> {
    let key =
        |(form, part, packed): &(RedisForm<'c>, usize, Vec<u8>)| ((*form, *part), packed.clone());
    parts.iter().map(key).collect()
}

/// Each item asked for after every other, while the other's is held: handed out again exactly
/// where the packed bytes are the same, and always with the item's own bytes.
fn shared_exactly_when_alike<K: std::fmt::Debug, T>(
    items: &[(K, Vec<u8>)],
    share: impl Fn(&K) -> Arc<T>,
    bytes: impl Fn(&T) -> Vec<u8>,
) {
    for (item, packed) in items {
        for (other, other_packed) in items {
            let before = share(other);
            let now = share(item);
            assert_eq!(&bytes(&now), packed, "{item:?}");
            assert_eq!(
                Arc::ptr_eq(&before, &now),
                packed == other_packed,
                "{item:?} after {other:?}"
            );
        }
    }
}

/// Lists of forms a batch with nothing to read sends as a pipeline of their parts, each with
/// its packed pipeline: every form alone, and pairs of some (a pair and its first form alone
/// differ by a form left over).
fn every_parts_list<'c>(
    parts: &[(RedisForm<'c>, usize, Vec<u8>)],
) -> Vec<(Vec<RedisForm<'c>>, Vec<u8>)> {
    // One of each form (debug-printed alike: the same form).
    let mut forms: Vec<RedisForm<'c>> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for (form, _, _) in parts {
        let printed = format!("{form:?}");
        if !seen.contains(&printed) {
            seen.push(printed);
            forms.push(*form);
        }
    }
    let mut lists: Vec<Vec<RedisForm<'c>>> = forms.iter().map(|form| vec![*form]).collect();
    // Some pairs of every kind: transactions, notices, scripts and plain commands together.
    let mut some: Vec<RedisForm<'c>> = Vec::new();
    for form in &forms {
        let kind = std::mem::discriminant(form);
        let many = some
            .iter()
            .filter(|f| std::mem::discriminant(*f) == kind)
            .count();
        if many < 2 {
            some.push(*form);
        }
    }
    for first in &some {
        for second in &some {
            lists.push(vec![*first, *second]);
        }
    }
    let packed = |list: Vec<RedisForm<'c>>| {
        let bytes = parts_pipeline(&list).get_packed_pipeline();
        (list, bytes)
    };
    lists.into_iter().map(packed).collect()
}

#[test]
fn a_pipeline_of_parts_encodes_to_forms_exactly_when_its_bytes_are_the_same() {
    let commands = every_command();
    let parts = every_part(&commands);
    let lists = every_parts_list(&parts);
    // Transactions (a `MULTI` of their own) and notices (a second command) are among them.
    let transactions = lists
        .iter()
        .filter(|(list, _)| list.iter().any(RedisForm::is_transaction));
    assert!(transactions.count() > 0, "no transaction form");
    assert!(
        lists
            .iter()
            .any(|(list, _)| list.len() == 1 && list[0].parts() == 2)
    );
    let mut shared = 0;
    for (list, packed) in &lists {
        let pipe = parts_pipeline(list);
        // What a blocking client's workers compare with: the same, packed.
        #[cfg(feature = "blocking")]
        let pack = resp::pack_parts(list);
        assert!(
            parts_encode_to(list, &pipe),
            "{list:?} and its own pipeline"
        );
        #[cfg(feature = "blocking")]
        assert!(parts_encode_as(list, pack.commands()), "{list:?} packed");
        for (other, other_packed) in &lists {
            let same = packed == other_packed;
            shared += usize::from(same);
            assert_eq!(
                parts_encode_to(other, &pipe),
                same,
                "{other:?} against the pipeline of {list:?}"
            );
            #[cfg(feature = "blocking")]
            assert_eq!(
                parts_encode_as(other, pack.commands()),
                same,
                "{other:?} against {list:?} packed"
            );
        }
    }
    assert!(shared > lists.len(), "some different lists encode alike");
    eprintln!("{} lists, {shared} pairs alike", lists.len());
}

#[cfg(any(feature = "tokio", feature = "smol"))]
#[test]
fn a_thread_hands_out_its_last_pipeline_of_parts_again_only_for_the_same_bytes() {
    let commands = every_command();
    let parts = every_part(&commands);
    let lists = every_parts_list(&parts);
    for (list, packed) in &lists {
        let first = parts_pipeline_shared(list);
        // A single command between them takes a slot of its own.
        let single = part_cmd_shared(&list[0], 0);
        let again = parts_pipeline_shared(list);
        assert!(Arc::ptr_eq(&first, &again), "{list:?} built twice");
        assert_eq!(&again.get_packed_pipeline(), packed);
        let gone = Arc::downgrade(&first);
        drop((first, again, single));
        assert!(gone.upgrade().is_none(), "{list:?} outlived its writes");
    }
    shared_exactly_when_alike(
        &lists,
        |list| parts_pipeline_shared(list),
        redis::Pipeline::get_packed_pipeline,
    );
}

#[cfg(feature = "blocking")]
#[test]
fn a_blocking_client_packs_once_what_its_workers_send_alike() {
    let commands = every_command();
    let parts = every_part(&commands);
    let last = LastPacked::default();
    // Another client's slot is its own.
    let other_client = LastPacked::default();
    for (form, part, packed) in &parts {
        let first = last.packed(form, *part);
        let again = std::thread::scope(|s| {
            let worker = last.clone();
            s.spawn(move || worker.packed(form, *part)).join()
        })
        .expect("a worker");
        assert!(
            Arc::ptr_eq(&first, &again),
            "{form:?} part {part} packed twice"
        );
        assert_eq!(again.bytes(), packed);
        assert!(!Arc::ptr_eq(&other_client.packed(form, *part), &first));
        // Once no worker holds it, nothing keeps it (nor its key and token).
        let gone = Arc::downgrade(&first);
        drop((first, again));
        assert!(
            gone.upgrade().is_none(),
            "{form:?} part {part} outlived its workers"
        );
    }
    shared_exactly_when_alike(
        &keyed(&parts),
        |(form, part)| last.packed(form, *part),
        |packed| packed.bytes().to_vec(),
    );
}

#[cfg(feature = "blocking")]
#[test]
fn a_blocking_client_packs_once_the_pipelines_of_parts_its_workers_send_alike() {
    let commands = every_command();
    let parts = every_part(&commands);
    let lists = every_parts_list(&parts);
    let last = LastPacked::default();
    let other_client = LastPacked::default();
    for (list, packed) in &lists {
        let first = last.packed_parts(list);
        let again = std::thread::scope(|s| {
            let worker = last.clone();
            // A single command between them takes a slot of its own.
            let single = last.packed(&list[0], 0);
            let again = s.spawn(move || worker.packed_parts(list)).join();
            drop(single);
            again
        })
        .expect("a worker");
        assert!(Arc::ptr_eq(&first, &again), "{list:?} packed twice");
        assert_eq!(again.bytes(), packed);
        assert!(!Arc::ptr_eq(&other_client.packed_parts(list), &first));
        let gone = Arc::downgrade(&first);
        drop((first, again));
        assert!(gone.upgrade().is_none(), "{list:?} outlived its workers");
    }
    shared_exactly_when_alike(
        &lists,
        |list| last.packed_parts(list),
        |packed| packed.bytes().to_vec(),
    );
}

#[test]
fn an_argument_written_in_pieces_must_match_all_of_the_expected_one() {
    let mut expected = redis::Cmd::new();
    expected.arg("PUBLISH").arg("redlock:released:lock").arg(1);
    // The expected arguments as a command holds them, and as a blocking client packs them.
    #[cfg(feature = "blocking")]
    let packed = resp::pack_args(&[b"PUBLISH", b"redlock:released:lock", b"1"]);
    let mut sources: Vec<Box<Compare<'_>>> = Vec::new();
    sources.push(Box::new(|pieces| {
        compare_pieces(expected.args_iter(), pieces)
    }));
    #[cfg(feature = "blocking")]
    sources.push(Box::new(|pieces| {
        let mut commands = packed.commands();
        let args = commands.next().expect("one command");
        compare_pieces(args, pieces)
    }));
    for compare in sources {
        let one: &[u8] = b"1";
        assert!(compare(&[
            &[b"PUBLISH"],
            &[b"redlock:released:", b"lock"],
            &[one]
        ]));
        // Shorter, longer, different, an argument missing or one too many: not the same.
        assert!(!compare(&[
            &[b"PUBLISH"],
            &[b"redlock:released:", b"loc"],
            &[one]
        ]));
        assert!(!compare(&[
            &[b"PUBLISH"],
            &[b"redlock:released:", b"locks"],
            &[one]
        ]));
        assert!(!compare(&[
            &[b"PUBLISH"],
            &[b"redlock:released:", b"lack"],
            &[one]
        ]));
        assert!(!compare(&[&[b"PUBLISH"], &[b"redlock:released:", b"lock"]]));
        assert!(!compare(&[
            &[b"PUBLISH"],
            &[b"redlock:released:", b"lock"],
            &[one],
            &[one]
        ]));
        assert!(!compare(&[
            &[b"PUBLISH"],
            &[b"redlock:released:lock", b""],
            &[b"2"]
        ]));
    }
}

/// Compares arguments written whole or in pieces with the expected ones.
type Compare<'e> = dyn Fn(&[&[&[u8]]]) -> bool + 'e;

/// Writes `pieces` (each argument whole, or in pieces through one writer) to a comparison with
/// `expected`: whether they were the same.
fn compare_pieces<'c>(
    expected: impl Iterator<Item = redis::Arg<&'c [u8]>>,
    pieces: &[&[&[u8]]],
) -> bool {
    let mut same = Same {
        expected,
        open: None,
        same: true,
    };
    for arg in pieces {
        if let [whole] = arg {
            same.write_arg(whole);
            continue;
        }
        let mut writer = same.writer_for_next_arg();
        for piece in *arg {
            io::Write::write_all(&mut writer, piece).expect("written");
        }
    }
    same.finish()
}

/// A transaction form's pipeline with anything but a bare `MULTI` before its parts, or a bare
/// `EXEC` after them, is not the form's (the same parts in the same place, but another command
/// around them).
#[test]
fn a_transactions_markers_must_be_exactly_multi_and_exec() {
    let commands = every_command();
    let parts = every_part(&commands);
    let lists = every_parts_list(&parts);
    let mut transactions = 0;
    for (list, _) in lists.iter().filter(|(list, _)| list.len() == 1) {
        let form = &list[0];
        if !form.is_transaction() {
            continue;
        }
        transactions += 1;
        let around = |before: redis::Cmd, after: redis::Cmd| {
            let mut pipe = redis::pipe();
            pipe.ignore_errors().add_command(before);
            for part in 0..form.parts() {
                pipe.add_command(part_cmd(form, part));
            }
            pipe.add_command(after);
            pipe
        };
        let word = |word: &str| redis::cmd(word);
        let mut multi_more = redis::cmd("MULTI");
        multi_more.arg("now");
        let mut exec_more = redis::cmd("EXEC");
        exec_more.arg("now");
        assert!(parts_encode_to(list, &around(word("MULTI"), word("EXEC"))));
        for (before, after) in [
            (word("PING"), word("EXEC")),
            (multi_more, word("EXEC")),
            (word("MULTI"), word("PING")),
            (word("MULTI"), exec_more),
        ] {
            let pipe = around(before, after);
            assert!(!parts_encode_to(list, &pipe), "{form:?}");
        }
    }
    assert!(transactions > 0, "no transaction form");
}

/// A blocking client packs each form, and each pipeline of parts, itself: byte for byte what
/// the redis crate packs from the command it would build.
#[cfg(feature = "blocking")]
#[test]
fn a_blocking_client_packs_exactly_the_redis_crates_bytes() {
    let commands = every_command();
    let parts = every_part(&commands);
    for (form, part, packed) in &parts {
        let ours = resp::pack(form, *part);
        assert_eq!(
            String::from_utf8_lossy(ours.bytes()),
            String::from_utf8_lossy(packed),
            "{form:?} part {part}"
        );
    }
    let lists = every_parts_list(&parts);
    for (list, packed) in &lists {
        let ours = resp::pack_parts(list);
        assert_eq!(
            String::from_utf8_lossy(ours.bytes()),
            String::from_utf8_lossy(packed),
            "{list:?}"
        );
    }
}

/// The arguments a pack names are exactly the ones the redis crate's command holds for the
/// same form (a channel written in pieces among them), command by command.
#[cfg(feature = "blocking")]
#[test]
fn a_pack_names_each_argument_it_carries() {
    let owned = |args: &mut dyn Iterator<Item = redis::Arg<&[u8]>>| -> Vec<Vec<u8>> {
        args.map(|arg| match arg {
            redis::Arg::Simple(arg) => arg.to_vec(),
            // A form writes no cursor.
            _ => b"<not an argument>".to_vec(),
        })
        .collect()
    };
    let commands = every_command();
    let parts = every_part(&commands);
    for (form, part, _) in &parts {
        let pack = resp::pack(form, *part);
        let ours: Vec<_> = pack.commands().map(|mut args| owned(&mut args)).collect();
        let theirs = owned(&mut part_cmd(form, *part).args_iter());
        assert_eq!(ours, vec![theirs], "{form:?} part {part}");
    }
    for (list, _) in &every_parts_list(&parts) {
        let pack = resp::pack_parts(list);
        let ours: Vec<_> = pack.commands().map(|mut args| owned(&mut args)).collect();
        let pipe = parts_pipeline(list);
        let theirs: Vec<_> = pipe
            .cmd_iter()
            .map(|cmd| owned(&mut cmd.args_iter()))
            .collect();
        assert_eq!(ours, theirs, "{list:?}");
    }
}
