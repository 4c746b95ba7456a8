//! Bearer-token authentication and roles, shared by both services.
//!
//! Tokens come from the configuration (`[[auth.tokens]]`) or from files, so a Kubernetes
//! secret can be mounted: an entry's `token_file` holds one token, and `auth.tokens_file`
//! holds a whole TOML list in the same shape as the inline entries. Only sha256 digests of
//! the tokens are kept in memory, and a presented token is compared against every entry in
//! constant time.
//!
//! [`Authenticator::interceptor`] turns a service into one that refuses calls without a known
//! token (`UNAUTHENTICATED`) and stores the caller's [`Principal`] in the request extensions;
//! handlers then call [`require`] with the roles a method accepts (`PERMISSION_DENIED` /
//! `ROLE_NOT_PERMITTED` otherwise).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tonic::metadata::{Ascii, MetadataMap, MetadataValue};
use tonic::service::Interceptor;
use tonic::{Request, Status};
use toolgate_contracts::status;
use toolgate_core::Reason;

pub(crate) mod role;

pub use role::Role;

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The principal's name, recorded in the ledger.
    pub name: String,
    /// What it may do.
    pub role: Role,
}

/// One credential in the configuration. Exactly one of `token` and `token_file` is set.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    /// The principal the token authenticates as.
    pub principal: String,
    /// Its role.
    pub role: Role,
    /// The token itself (prefer `token_file` outside development).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// A file holding the token (surrounding whitespace is ignored), for mounted secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
}

// Never print a token, whatever prints the configuration.
impl fmt::Debug for TokenEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenEntry")
            .field("principal", &self.principal)
            .field("role", &self.role)
            .field(
                "token",
                &self.token.as_ref().map(|_| toolgate_core::REDACTED),
            )
            .field("token_file", &self.token_file)
            .finish()
    }
}

/// The `[auth]` configuration section.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Inline credentials.
    pub tokens: Vec<TokenEntry>,
    /// A TOML file with more credentials: `[[tokens]]` tables shaped like the inline ones.
    pub tokens_file: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    #[serde(default)]
    tokens: Vec<TokenEntry>,
}

/// Why the credentials could not be loaded. The message names the entry.
#[derive(Debug, thiserror::Error)]
#[error("auth: {0}")]
pub struct AuthError(String);

/// Smallest token accepted, in bytes: shorter ones are guessable.
pub const MIN_TOKEN_LEN: usize = 16;

/// Checks bearer tokens against the configured credentials.
#[derive(Clone)]
pub struct Authenticator {
    entries: Arc<Vec<([u8; 32], Principal)>>,
    /// Roles whose calls must arrive with a verified client certificate.
    cert_roles: Arc<Vec<Role>>,
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authenticator")
            .field("credentials", &self.entries.len())
            .finish()
    }
}

impl Authenticator {
    /// Loads every credential the configuration names. At least one is required.
    pub fn from_config(config: &AuthConfig) -> Result<Self, AuthError> {
        let mut all = config.tokens.clone();
        if let Some(path) = &config.tokens_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| AuthError(format!("tokens_file {}: {e}", path.display())))?;
            let file: TokensFile = toml::from_str(&text)
                .map_err(|e| AuthError(format!("tokens_file {}: {e}", path.display())))?;
            all.extend(file.tokens);
        }
        if all.is_empty() {
            return Err(AuthError(
                "no credentials configured: add [[auth.tokens]] entries or set auth.tokens_file"
                    .into(),
            ));
        }
        let mut entries: Vec<([u8; 32], Principal)> = Vec::with_capacity(all.len());
        for (i, e) in all.iter().enumerate() {
            let token = entry_token(i, e)?;
            if e.principal.trim().is_empty() {
                return Err(AuthError(format!("tokens[{i}].principal is empty")));
            }
            let digest = digest(&token);
            if entries.iter().any(|(d, _)| *d == digest) {
                return Err(AuthError(format!(
                    "tokens[{i}] ({}) reuses another entry's token; every credential needs its own",
                    e.principal
                )));
            }
            entries.push((
                digest,
                Principal {
                    name: e.principal.clone(),
                    role: e.role,
                },
            ));
        }
        Ok(Authenticator {
            entries: Arc::new(entries),
            cert_roles: Arc::new(Vec::new()),
        })
    }

    /// Requires calls by these roles to arrive over a connection whose client certificate
    /// the server's client CA verified (`transport.tls.client_cert_roles`): a stolen token
    /// alone is then not enough.
    #[must_use]
    pub fn with_client_cert_roles(mut self, roles: &[Role]) -> Self {
        self.cert_roles = Arc::new(roles.to_vec());
        self
    }

    /// `UNAUTHENTICATED` when `p`'s role needs a client certificate and the connection
    /// (`conn`, from the request's extensions) has none.
    pub fn check_client_cert(
        &self,
        p: &Principal,
        conn: Option<&crate::transport::ConnInfo>,
    ) -> Result<(), Status> {
        if !self.cert_roles.contains(&p.role) || conn.is_some_and(|c| c.peer_certs.is_some()) {
            return Ok(());
        }
        Err(status::status(
            Reason::Unauthenticated,
            format!(
                "{} has role `{}`, which must call over mutual TLS: connect with a client \
                 certificate signed by this server's client CA (transport.tls.client_cert_roles)",
                p.name, p.role
            ),
            [
                ("principal", p.name.clone()),
                ("role", p.role.as_str().to_owned()),
            ],
        ))
    }

    /// The principal a token authenticates, comparing against every entry in constant time.
    pub fn check(&self, token: &str) -> Option<Principal> {
        let presented = digest(token);
        let mut found = None;
        for (d, p) in self.entries.iter() {
            // No early exit: every entry costs the same whether or not it matches.
            if constant_time_eq(d, &presented) {
                found = Some(p);
            }
        }
        found.cloned()
    }

    /// The caller of a request, from its `authorization: Bearer <token>` header.
    pub fn authenticate(&self, metadata: &MetadataMap) -> Result<Principal, Status> {
        let header = metadata.get("authorization").ok_or_else(|| {
            unauthenticated("no credential: send `authorization: Bearer <token>`")
        })?;
        let value = header
            .to_str()
            .map_err(|_| unauthenticated("the authorization header is not ASCII"))?;
        let token = parse_bearer(value)
            .ok_or_else(|| unauthenticated("the authorization header must be `Bearer <token>`"))?;
        self.check(token)
            .ok_or_else(|| unauthenticated("unknown or revoked token"))
    }

    /// A tonic interceptor that authenticates every call and stores its [`Principal`].
    pub fn interceptor(&self) -> AuthInterceptor {
        AuthInterceptor(self.clone())
    }
}

fn entry_token(i: usize, e: &TokenEntry) -> Result<String, AuthError> {
    let token = match (&e.token, &e.token_file) {
        (Some(t), None) => t.clone(),
        (None, Some(path)) => read_token_file(path)
            .map_err(|m| AuthError(format!("tokens[{i}] ({}).token_file: {m}", e.principal)))?,
        _ => {
            return Err(AuthError(format!(
                "tokens[{i}] ({}) needs exactly one of `token` or `token_file`",
                e.principal
            )));
        }
    };
    if token.len() < MIN_TOKEN_LEN {
        return Err(AuthError(format!(
            "tokens[{i}] ({}) is shorter than {MIN_TOKEN_LEN} bytes",
            e.principal
        )));
    }
    if !is_token(&token) {
        return Err(AuthError(format!(
            "tokens[{i}] ({}) has characters a bearer header cannot carry (only visible ASCII)",
            e.principal
        )));
    }
    Ok(token)
}

fn read_token_file(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(text.trim().to_owned())
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

fn unauthenticated(message: &str) -> Status {
    status::status(Reason::Unauthenticated, message, [])
}

/// The interceptor returned by [`Authenticator::interceptor`].
#[derive(Debug, Clone)]
pub struct AuthInterceptor(Authenticator);

impl Interceptor for AuthInterceptor {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let principal = self.0.authenticate(request.metadata())?;
        self.0.check_client_cert(
            &principal,
            request.extensions().get::<crate::transport::ConnInfo>(),
        )?;
        request.extensions_mut().insert(principal);
        Ok(request)
    }
}

/// The caller stored by the interceptor (`UNAUTHENTICATED` when the service is not wrapped).
pub fn caller<T>(request: &Request<T>) -> Result<Principal, Status> {
    request
        .extensions()
        .get::<Principal>()
        .cloned()
        .ok_or_else(|| unauthenticated("this endpoint requires a bearer token"))
}

/// The caller, if its role is one of `roles`; `PERMISSION_DENIED` / `ROLE_NOT_PERMITTED` otherwise.
pub fn require<T>(request: &Request<T>, method: &str, roles: &[Role]) -> Result<Principal, Status> {
    let p = caller(request)?;
    NotPermitted::check(&p, method, roles).map_err(|e| status::from_error(&e))?;
    Ok(p)
}

/// A caller whose role may not call a method: the domain form of `PERMISSION_DENIED` /
/// `ROLE_NOT_PERMITTED`, for cores that check roles themselves.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{principal} has role `{role}`; {method} needs one of: {allowed}")]
pub struct NotPermitted {
    /// The caller's name.
    pub principal: String,
    /// The caller's role.
    pub role: Role,
    /// The method it called.
    pub method: String,
    /// The roles that may call it, comma-separated.
    pub allowed: String,
}

impl NotPermitted {
    /// `Ok` when `p`'s role is one of `roles`, else the refusal for `p` calling `method`.
    pub fn check(p: &Principal, method: &str, roles: &[Role]) -> Result<(), NotPermitted> {
        if roles.contains(&p.role) {
            return Ok(());
        }
        let allowed: Vec<&str> = roles.iter().map(|r| r.as_str()).collect();
        Err(NotPermitted {
            principal: p.name.clone(),
            role: p.role,
            method: method.to_owned(),
            allowed: allowed.join(", "),
        })
    }
}

impl toolgate_core::ReasonedError for NotPermitted {
    fn reason(&self) -> Reason {
        Reason::RoleNotPermitted
    }

    fn metadata(&self) -> Vec<(&'static str, String)> {
        vec![
            ("principal", self.principal.clone()),
            ("role", self.role.as_str().to_owned()),
        ]
    }
}

/// The token of an `Authorization` header value (gRPC `authorization` metadata or HTTP),
/// or `None` when it is not a bearer credential.
///
/// The one reading of the header for every server, as RFC 7235 and RFC 6750 spell it: the
/// scheme `Bearer` in any case, one or more spaces, then a non-empty token of visible ASCII
/// (no inner whitespace). Whitespace around the whole value is ignored, as HTTP ignores it
/// around any field value. Any other scheme (`Basic`, ...) is `None`: a server that knows
/// only bearer tokens refuses the call rather than guess.
pub fn parse_bearer(value: &str) -> Option<&str> {
    let value = value.trim_matches([' ', '\t']);
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim_start_matches(' ');
    (scheme.eq_ignore_ascii_case("bearer") && is_token(token)).then_some(token)
}

/// Whether `token` can travel as a bearer credential: non-empty visible ASCII.
fn is_token(token: &str) -> bool {
    !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic())
}

/// The `authorization` header value for `token`, for clients: `Bearer <token>`, the
/// spelling [`parse_bearer`] reads back.
pub fn bearer(token: &str) -> Result<MetadataValue<Ascii>, AuthError> {
    let token = token.trim();
    if !is_token(token) {
        return Err(AuthError(
            "the token is empty or has characters a bearer header cannot carry (only visible ASCII)"
                .into(),
        ));
    }
    MetadataValue::try_from(format!("Bearer {token}"))
        .map_err(|_| AuthError("the token has characters a header cannot carry".into()))
}

/// The client side: adds `authorization: Bearer <token>` to every request it intercepts, or
/// nothing when built with [`Bearer::none`]. Its `Debug` output never shows the token.
#[derive(Clone)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl Bearer {
    /// Presents `token` on every call.
    pub fn new(token: &str) -> Result<Self, AuthError> {
        Ok(Bearer(Some(bearer(token)?)))
    }

    /// Presents no credential (for servers without authentication, and for tests of that).
    pub fn none() -> Self {
        Bearer(None)
    }
}

impl fmt::Debug for Bearer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Bearer([REDACTED])"
        } else {
            "Bearer(none)"
        })
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// A fresh random token (256 bits, hex), for generated credentials.
pub fn generate_token() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> AuthConfig {
        AuthConfig {
            tokens: vec![
                TokenEntry {
                    principal: "alice".into(),
                    role: Role::Approver,
                    token: Some("alice-token-0123456789".into()),
                    token_file: None,
                },
                TokenEntry {
                    principal: "agent-1".into(),
                    role: Role::Agent,
                    token: Some("agent-token-0123456789".into()),
                    token_file: None,
                },
            ],
            tokens_file: None,
        }
    }

    fn metadata(value: &str) -> MetadataMap {
        let mut m = MetadataMap::new();
        m.insert("authorization", value.parse().unwrap());
        m
    }

    #[test]
    fn known_tokens_map_to_their_principal() {
        let a = Authenticator::from_config(&config()).unwrap();
        let p = a
            .authenticate(&metadata("Bearer alice-token-0123456789"))
            .unwrap();
        assert_eq!(p.name, "alice");
        assert_eq!(p.role, Role::Approver);
        let p = a.check("agent-token-0123456789").unwrap();
        assert_eq!(p.role, Role::Agent);
    }

    #[test]
    fn missing_malformed_and_unknown_credentials_are_unauthenticated() {
        let a = Authenticator::from_config(&config()).unwrap();
        for bad in [
            metadata("alice-token-0123456789"),
            metadata("Basic alice-token-0123456789"),
            metadata("Bearer alice-token-012345678"),
            metadata("Bearer "),
            MetadataMap::new(),
        ] {
            let e = a.authenticate(&bad).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated, "{bad:?}");
        }
    }

    #[test]
    fn bearer_credentials_parse_in_every_spelling_rfc_7235_allows() {
        for (value, token) in [
            ("Bearer abc.def-123", "abc.def-123"),
            ("bearer abc", "abc"),
            ("BEARER abc", "abc"),
            ("bEaReR abc", "abc"),
            ("Bearer   abc", "abc"),
            ("  Bearer abc\t", "abc"),
            ("Bearer abc==", "abc=="),
        ] {
            assert_eq!(parse_bearer(value), Some(token), "{value:?}");
        }
        for value in [
            "",
            "Bearer",
            "Bearer ",
            "Bearer    ",
            "Bearerabc",
            "Bearer\tabc",
            "Bearer abc def",
            "Bearer abc\tdef",
            "Basic YWxpY2U6c2VjcmV0",
            "Token abc",
            "Bearers abc",
            "abc",
            "Bearer ab\u{e9}",
        ] {
            assert_eq!(parse_bearer(value), None, "{value:?}");
        }
    }

    #[test]
    fn the_client_header_reads_back_as_its_token() {
        let value = bearer(" alice-token-0123456789\n").unwrap();
        assert_eq!(value.to_str().unwrap(), "Bearer alice-token-0123456789");
        assert_eq!(
            parse_bearer(value.to_str().unwrap()),
            Some("alice-token-0123456789")
        );
        for bad in ["", "  ", "two words", "caf\u{e9}", "a\u{7f}b"] {
            assert!(bearer(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn token_files_and_token_lists_load() {
        let dir = tempfile::tempdir().unwrap();
        let one = dir.path().join("one");
        std::fs::write(&one, "file-token-0123456789\n").unwrap();
        let list = dir.path().join("tokens.toml");
        std::fs::write(
            &list,
            "[[tokens]]\nprincipal = \"exec\"\nrole = \"executor\"\ntoken = \"exec-token-0123456789\"\n",
        )
        .unwrap();
        let mut c = config();
        c.tokens.push(TokenEntry {
            principal: "ops".into(),
            role: Role::Admin,
            token: None,
            token_file: Some(one),
        });
        c.tokens_file = Some(list);
        let a = Authenticator::from_config(&c).unwrap();
        assert_eq!(a.check("file-token-0123456789").unwrap().name, "ops");
        assert_eq!(
            a.check("exec-token-0123456789").unwrap().role,
            Role::Executor
        );
    }

    #[test]
    fn bad_credential_sets_are_refused_with_the_entry_named() {
        assert!(Authenticator::from_config(&AuthConfig::default()).is_err());
        let mut c = config();
        c.tokens[1].token = Some("short".into());
        let e = Authenticator::from_config(&c).unwrap_err().to_string();
        assert!(e.contains("tokens[1]") && e.contains("agent-1"), "{e}");
        let mut c = config();
        c.tokens[1].token = c.tokens[0].token.clone();
        assert!(
            Authenticator::from_config(&c)
                .unwrap_err()
                .to_string()
                .contains("reuses")
        );
        let mut c = config();
        c.tokens[0].token_file = Some("/nonexistent".into());
        assert!(
            Authenticator::from_config(&c)
                .unwrap_err()
                .to_string()
                .contains("exactly one")
        );
    }

    #[test]
    fn roles_are_enforced_per_method() {
        let mut r = Request::new(());
        r.extensions_mut().insert(Principal {
            name: "agent-1".into(),
            role: Role::Agent,
        });
        let e = require(&r, "DecideApproval", &[Role::Approver, Role::Admin]).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert!(e.message().contains("agent-1"), "{}", e.message());
        assert!(require(&r, "Classify", &[Role::Agent]).is_ok());
        let bare = Request::new(());
        assert_eq!(
            caller(&bare).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
    }

    #[test]
    fn debug_output_hides_tokens() {
        let d = format!("{:?}", config());
        assert!(!d.contains("alice-token"), "{d}");
        let generated = generate_token();
        assert_eq!(generated.len(), 64);
        assert_ne!(generated, generate_token());
    }

    #[test]
    fn the_client_interceptor_presents_the_token_and_hides_it() {
        let mut with = Bearer::new("alice-token-0123456789").unwrap();
        let request = with.call(Request::new(())).unwrap();
        assert_eq!(
            request.metadata().get("authorization").unwrap(),
            "Bearer alice-token-0123456789"
        );
        assert_eq!(format!("{with:?}"), "Bearer([REDACTED])");
        let request = Bearer::none().call(Request::new(())).unwrap();
        assert!(request.metadata().get("authorization").is_none());
        assert!(Bearer::new("bad\ntoken").is_err());
    }
}
