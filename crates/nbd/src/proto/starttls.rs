//! `NBD_OPT_STARTTLS` in the server's handshake: the modes of the spec's
//! "TLS support" section, and the upgrade's place in option haggling. It
//! exists so that what a client may do before TLS is decided in one place;
//! it must never let a FORCEDTLS client reach an export in plaintext.

use super::*;

/// Whether the server offers TLS (`NBD_OPT_STARTTLS`), the spec's modes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TlsMode {
    /// NOTLS: STARTTLS is refused with `NBD_REP_ERR_POLICY`.
    #[default]
    Off,
    /// SELECTIVETLS with no TLS-only export: a client may upgrade, or not.
    On,
    /// FORCEDTLS: every option but STARTTLS and ABORT is refused with
    /// `NBD_REP_ERR_TLS_REQD` until TLS is up; EXPORT_NAME closes.
    Require,
}

/// The text of every `NBD_REP_ERR_TLS_REQD` reply.
pub(super) const TLS_REQUIRED_MESSAGE: &str = "TLS is required: send NBD_OPT_STARTTLS first";

impl Handshake {
    /// The same handshake, offering TLS as `mode` says (before any input).
    pub fn with_tls(mut self, mode: TlsMode) -> Self {
        assert_eq!(self.state, State::ClientFlags);
        self.tls_mode = mode;
        self
    }

    /// The connection now runs over TLS (after `HandshakeEvent::StartTls`):
    /// option haggling goes on.
    pub fn tls_started(&mut self) {
        assert_eq!(self.state, State::AwaitingTls);
        assert!(!self.tls_active);
        self.tls_active = true;
        self.state = State::OptionHeader;
    }

    /// True between `HandshakeEvent::StartTls` and `tls_started`.
    pub fn is_awaiting_tls(&self) -> bool {
        self.state == State::AwaitingTls
    }

    /// FORCEDTLS before the upgrade: options other than STARTTLS and ABORT
    /// are refused.
    pub(super) fn tls_required_now(&self) -> bool {
        self.tls_mode == TlsMode::Require && !self.tls_active
    }

    pub(super) fn on_starttls(&mut self, data: &[u8]) {
        let option = OPT_STARTTLS;
        if self.tls_mode == TlsMode::Off {
            self.reply_error(option, REP_ERR_POLICY, "TLS is off on this server");
        } else if self.tls_active {
            self.reply_error(option, REP_ERR_INVALID, "TLS is already active");
        } else if !data.is_empty() {
            self.reply_error(option, REP_ERR_INVALID, "NBD_OPT_STARTTLS takes no data");
        } else {
            self.reply(option, REP_ACK, &[]);
            self.state = State::AwaitingTls;
            self.events.push_back(HandshakeEvent::StartTls);
        }
    }
}
