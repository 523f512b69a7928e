//! How a `redis-server` is configured: the builder behind [`RedisServer::start`].

use std::env;
use std::ffi::OsString;
use std::net::SocketAddr;

use crate::error::HarnessError;
use crate::server::{self, RedisServer};

/// Environment variable naming the `redis-server` binary; `redis-server` on `PATH` otherwise.
pub const REDIS_SERVER_ENV: &str = "REDIS_SERVER";

/// Environment variable naming a `valkey-server` binary, for [`ServerOptions::valkey`]
/// (`scripts/ensure-valkey.sh` fetches one and prints its path).
pub const VALKEY_SERVER_ENV: &str = "VALKEY_SERVER";
/// Environment variable naming a `valkey-server` 9.1 (native commands; `scripts/test.sh` sets
/// it from `scripts/ensure-valkey.sh 9.1`).
pub const VALKEY9_SERVER_ENV: &str = "VALKEY9_SERVER";

/// Environment variable that, set to `1`, makes every server the harness starts without
/// credentials of its own take its clients as an ACL user denied `@scripting` (`+@all
/// -@scripting`, every key and channel): what a managed service or a locked-down deployment
/// gives a lock library. The URLs name that user, so every client and inspection uses it.
pub const DENY_SCRIPTING_ENV: &str = "REDLOCK_DENY_SCRIPTING";

/// Environment variable that mixes servers in every set of servers the harness starts with default
/// binaries: a comma-separated list of `redis-server`/`valkey-server` paths, each optionally
/// followed by `#no-scripting` (that server then takes clients as the user of
/// [`DENY_SCRIPTING_ENV`]); server `i` of a set runs entry `i` modulo the list's length.
pub const MIX_ENV: &str = "REDLOCK_MIX";

/// The ACL user of [`DENY_SCRIPTING_ENV`].
const NO_SCRIPTS_USER: (&str, &str) = ("locker", "no-scripts");

/// Settings for the `redis-server` processes the harness starts.
///
/// Every server always gets `--port P --bind 127.0.0.1 --save "" --appendonly no --dir <temp dir>`;
/// the options here come on top.
///
/// ```no_run
/// use redlock_local::ServerOptions;
///
/// let server = ServerOptions::new().requirepass("s3cret").maxmemory(1).start();
/// ```
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct ServerOptions {
    binary: Option<OsString>,
    requirepass: Option<String>,
    acl_user: Option<(String, String)>,
    maxmemory: Option<u64>,
    replica_of: Option<SocketAddr>,
    extra_args: Vec<String>,
    /// Whether clients log in as a user denied `@scripting` (`None`: as
    /// [`DENY_SCRIPTING_ENV`] says).
    deny_scripting: Option<bool>,
    #[cfg(feature = "tls")]
    tls: Option<ServerTls>,
}

/// How a server speaks TLS: its certificates, and whether clients must show one.
#[cfg(feature = "tls")]
#[derive(Clone, Debug)]
pub(crate) struct ServerTls {
    pub(crate) files: std::sync::Arc<crate::tls::TlsFiles>,
    pub(crate) client_certs: bool,
}

/// Username and password a client must send, if any.
#[derive(Clone, Debug, Default)]
pub(crate) struct Credentials {
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

impl ServerOptions {
    /// Default settings: no password, no memory limit.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs this binary instead of `$REDIS_SERVER` or `redis-server` on `PATH`.
    pub fn binary(mut self, path: impl Into<OsString>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Runs the `valkey-server` that `$VALKEY_SERVER` names.
    ///
    /// # Errors
    /// [`HarnessError::MissingValkey`] if the variable is not set: a test that asks for Valkey
    /// fails rather than silently running Redis.
    pub fn valkey(self) -> Result<Self, HarnessError> {
        match env::var_os(VALKEY_SERVER_ENV).filter(|value| !value.is_empty()) {
            Some(path) => Ok(self.binary(path)),
            None => Err(HarnessError::MissingValkey),
        }
    }

    /// Runs the `valkey-server` 9.1 that [`VALKEY9_SERVER_ENV`] names.
    ///
    /// # Errors
    /// [`HarnessError::MissingValkey9`] if the variable is not set.
    pub fn valkey9(self) -> Result<Self, HarnessError> {
        match env::var_os(VALKEY9_SERVER_ENV).filter(|value| !value.is_empty()) {
            Some(path) => Ok(self.binary(path)),
            None => Err(HarnessError::MissingValkey9),
        }
    }

    /// Sets `requirepass`: the `default` user needs this password.
    pub fn requirepass(mut self, password: impl Into<String>) -> Self {
        self.requirepass = Some(password.into());
        self
    }

    /// Adds an ACL user with every permission (`~* &* +@all`). Inspection clients and
    /// [`RedisServer::url`] then log in as this user.
    pub fn acl_user(mut self, username: impl Into<String>, password: impl Into<String>) -> Self {
        self.acl_user = Some((username.into(), password.into()));
        self
    }

    /// Clients log in as an ACL user denied `@scripting` (`true`), or as
    /// [`DENY_SCRIPTING_ENV`] says (`false` overrides it: never).
    pub fn deny_scripting(mut self, deny: bool) -> Self {
        self.deny_scripting = Some(deny);
        self
    }

    /// Whether clients log in as a user denied `@scripting` (set here, by [`MIX_ENV`] or by
    /// [`DENY_SCRIPTING_ENV`]).
    pub fn denies_scripting(&self) -> bool {
        self.acl().is_some_and(|(_, _, denied)| denied)
    }

    /// The options of server `index` of a set started with these: as they are, unless
    /// [`MIX_ENV`] names servers and these name no binary.
    pub(crate) fn mixed(&self, index: usize) -> Self {
        let Some((binary, deny)) = self.mix_entry(index) else {
            return self.clone();
        };
        let mut options = self.clone().binary(binary);
        if self.deny_scripting.is_none() {
            options.deny_scripting = Some(deny);
        }
        options
    }

    /// The options of server `index` of a set with one ACL configuration (a cluster): the
    /// binary of [`mixed`](Self::mixed), never its `#no-scripting` mark.
    pub(crate) fn mixed_binary(&self, index: usize) -> Self {
        match self.mix_entry(index) {
            Some((binary, _)) => self.clone().binary(binary),
            None => self.clone(),
        }
    }

    /// Entry `index` (modulo its length) of [`MIX_ENV`]: a binary, and whether it is marked
    /// `#no-scripting`; `None` when these options name a binary or the variable names none.
    fn mix_entry(&self, index: usize) -> Option<(String, bool)> {
        if self.binary.is_some() {
            return None;
        }
        let mix = env::var(MIX_ENV).unwrap_or_default();
        let entries: Vec<&str> = mix
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        let entry = entries.get(index % entries.len().max(1))?;
        Some(match entry.strip_suffix("#no-scripting") {
            Some(binary) => (binary.to_owned(), true),
            None => ((*entry).to_owned(), false),
        })
    }

    /// Sets `maxmemory` in bytes (policy stays `noeviction`, so `maxmemory(1)` makes every write
    /// fail with `OOM`).
    pub fn maxmemory(mut self, bytes: u64) -> Self {
        self.maxmemory = Some(bytes);
        self
    }

    /// Makes the server a replica of `primary` (writes then fail with `READONLY`).
    pub fn replica_of(mut self, primary: SocketAddr) -> Self {
        self.replica_of = Some(primary);
        self
    }

    /// Serves TLS only (no plain port), with the server certificate of `files`; with
    /// `client_certs`, clients must show a certificate the same CA signed (mutual TLS).
    /// Inspection clients and [`RedisServer::url`] then use `rediss://` and the CA (and client
    /// certificate) of `files`.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, files: std::sync::Arc<crate::tls::TlsFiles>, client_certs: bool) -> Self {
        self.tls = Some(ServerTls {
            files,
            client_certs,
        });
        self
    }

    /// Whether the server speaks TLS only.
    pub fn is_tls(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.tls.is_some();
        #[cfg(not(feature = "tls"))]
        false
    }

    /// The TLS settings, if any.
    #[cfg(feature = "tls")]
    pub(crate) fn tls_settings(&self) -> Option<&ServerTls> {
        self.tls.as_ref()
    }

    /// Where the server listens: `--port P`, or `--port 0 --tls-port P` and its certificates.
    pub(crate) fn listen_args(&self, port: u16) -> Vec<String> {
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            let path = |name: &str| tls.files.path(name).to_string_lossy().into_owned();
            return vec![
                "--port".to_owned(),
                "0".to_owned(),
                "--tls-port".to_owned(),
                port.to_string(),
                "--tls-cert-file".to_owned(),
                path("server.crt"),
                "--tls-key-file".to_owned(),
                path("server.key"),
                "--tls-ca-cert-file".to_owned(),
                path("ca.crt"),
                "--tls-auth-clients".to_owned(),
                if tls.client_certs { "yes" } else { "no" }.to_owned(),
            ];
        }
        vec!["--port".to_owned(), port.to_string()]
    }

    /// Appends one raw command-line argument, e.g. `.arg("--hz").arg("100")`.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    /// Appends raw command-line arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.extra_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Starts a server with these options.
    ///
    /// # Panics
    /// If the server cannot be started; the message says why (e.g. how to install
    /// `redis-server`). Use [`ServerOptions::try_start`] to get the error instead.
    pub fn start(&self) -> RedisServer {
        self.try_start().unwrap_or_else(|err| panic!("{err}"))
    }

    /// Starts a server with these options.
    pub fn try_start(&self) -> Result<RedisServer, HarnessError> {
        let mut servers = server::start_many(self, 1)?;
        Ok(servers.remove(0))
    }

    /// The program to run.
    pub(crate) fn program(&self) -> OsString {
        self.binary
            .clone()
            .or_else(|| env::var_os(REDIS_SERVER_ENV).filter(|value| !value.is_empty()))
            .unwrap_or_else(|| "redis-server".into())
    }

    /// Command-line arguments beyond the fixed ones.
    pub(crate) fn command_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(password) = &self.requirepass {
            args.extend(["--requirepass".to_owned(), password.clone()]);
        }
        if let Some((username, password, deny_scripting)) = self.acl() {
            args.extend(
                [
                    "--user",
                    &username,
                    "on",
                    &format!(">{password}"),
                    "~*",
                    "&*",
                    "+@all",
                ]
                .map(str::to_owned),
            );
            if deny_scripting {
                args.push("-@scripting".to_owned());
            }
        }
        if let Some(bytes) = self.maxmemory {
            args.extend(["--maxmemory".to_owned(), bytes.to_string()]);
        }
        if let Some(primary) = self.replica_of {
            args.extend([
                "--replicaof".to_owned(),
                primary.ip().to_string(),
                primary.port().to_string(),
            ]);
        }
        args.extend(self.extra_args.iter().cloned());
        args
    }

    /// The ACL user clients log in as, and whether it is denied `@scripting`: the one set
    /// with [`ServerOptions::acl_user`], else [`DENY_SCRIPTING_ENV`]'s when it is set and no
    /// password is.
    fn acl(&self) -> Option<(String, String, bool)> {
        if let Some((username, password)) = &self.acl_user {
            return Some((username.clone(), password.clone(), false));
        }
        let denied = self
            .deny_scripting
            .unwrap_or_else(|| env::var(DENY_SCRIPTING_ENV).is_ok_and(|value| value == "1"));
        (denied && self.requirepass.is_none()).then(|| {
            let (username, password) = NO_SCRIPTS_USER;
            (username.to_owned(), password.to_owned(), true)
        })
    }

    /// What the harness's own inspection connections send: the clients' credentials, but the
    /// default user's (none) when only [`DENY_SCRIPTING_ENV`] set them — the harness itself
    /// still flushes scripts and runs them to make a node busy.
    pub(crate) fn inspection_credentials(&self) -> Credentials {
        if self.acl_user.is_none() && self.requirepass.is_none() {
            Credentials::default()
        } else {
            self.credentials()
        }
    }

    /// What a client must send to log in.
    pub(crate) fn credentials(&self) -> Credentials {
        match (self.acl(), &self.requirepass) {
            (Some((username, password, _)), _) => Credentials {
                username: Some(username),
                password: Some(password),
            },
            (None, Some(password)) => Credentials {
                username: None,
                password: Some(password.clone()),
            },
            (None, None) => Credentials::default(),
        }
    }
}
