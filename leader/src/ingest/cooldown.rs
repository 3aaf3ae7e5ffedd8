//! Remote addresses that sent a message over `--max-message-bytes`, and the connections
//! they may open meanwhile.
//!
//! An oversize message is refused from its length prefix, before a byte of it is decoded,
//! but HTTP/2 has by then carried up to a flow-control window of it, and a sender that
//! opens the next stream at once makes the leader read windows of bytes it throws away. No
//! agent of ours sends such a message (its own limit is smaller), so its address cools
//! down: its open connections are no longer read (what the leader still has to say, the
//! status that ends the stream, is written) and are closed [`GRACE`] later, and connections
//! it opens are closed as they are accepted, for a first cooldown (a second by default) at the first
//! offence and twice as long at every further one, up to 64 times the first. An address
//! without offence for [`FORGIVE`] after its cooldown starts over.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// How many times the first cooldown the longest is.
const LONGEST: u32 = 64;
/// How long a connection of an address cooling down is kept, unread, for the leader's last
/// words to reach the agent.
pub const GRACE: Duration = Duration::from_secs(1);
/// Time without offence after which an address starts over at [`FIRST`].
pub const FORGIVE: Duration = Duration::from_secs(600);
/// Addresses remembered at most; past it, forgiven ones are dropped first, and a new
/// offender is not remembered while every slot is cooling down.
const CAPACITY: usize = 1 << 16;

/// Addresses cooling down.
#[derive(Debug)]
pub struct Cooldowns {
    /// The first cooldown of an address.
    first: Duration,
    /// Bumped at every offence: an open connection looks its address up only when this
    /// moved since its last read.
    generation: AtomicU64,
    offenders: Mutex<HashMap<IpAddr, Offender>>,
}

#[derive(Clone, Copy, Debug)]
struct Offender {
    /// Offences since the address was last forgiven.
    offences: u32,
    /// The end of its cooldown.
    until: Instant,
}

impl Cooldowns {
    /// Cooldowns that start at `first`.
    pub fn new(first: Duration) -> Self {
        Cooldowns {
            first,
            generation: AtomicU64::default(),
            offenders: Mutex::default(),
        }
    }

    /// Records an offence of `address` at `now`; the answer is its cooldown (none when
    /// every remembered address is cooling down).
    pub fn offence(&self, address: IpAddr, now: Instant) -> Option<Duration> {
        let mut offenders = self.offenders.lock().unwrap_or_else(|e| e.into_inner());
        if offenders.len() >= CAPACITY && !offenders.contains_key(&address) {
            offenders.retain(|_, o| now < o.until + FORGIVE);
            if offenders.len() >= CAPACITY {
                return None;
            }
        }
        let offender = offenders.entry(address).or_insert(Offender {
            offences: 0,
            until: now,
        });
        if now >= offender.until + FORGIVE {
            offender.offences = 0;
        }
        offender.offences = offender.offences.saturating_add(1);
        let cooldown = self
            .first
            .saturating_mul(1 << (offender.offences - 1).min(16))
            .min(self.first.saturating_mul(LONGEST));
        offender.until = now + cooldown;
        self.generation.fetch_add(1, Ordering::Release);
        Some(cooldown)
    }

    /// Whether `address` is cooling down at `now`.
    pub fn cooling(&self, address: IpAddr, now: Instant) -> bool {
        let offenders = self.offenders.lock().unwrap_or_else(|e| e.into_inner());
        offenders.get(&address).is_some_and(|o| now < o.until)
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

/// An accepted connection, no longer read once its address is cooling down and closed
/// [`GRACE`] later.
#[derive(Debug)]
pub struct Connection {
    inner: TcpStream,
    address: Option<IpAddr>,
    cooldowns: Arc<Cooldowns>,
    /// The generation of `cooldowns` this connection last checked.
    seen: u64,
    /// Set once the address is cooling down: when the connection closes.
    closing: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Connection {
    /// `inner` as accepted; `None` when its address is cooling down (the caller drops it).
    pub fn accept(inner: TcpStream, cooldowns: Arc<Cooldowns>) -> Option<Connection> {
        let address = inner.peer_addr().ok().map(|a| a.ip());
        let seen = cooldowns.generation();
        if address.is_some_and(|a| cooldowns.cooling(a, Instant::now())) {
            return None;
        }
        Some(Connection {
            inner,
            address,
            cooldowns,
            seen,
            closing: None,
        })
    }

    /// Whether Nagle's algorithm is off.
    #[cfg(test)]
    pub fn nodelay(&self) -> io::Result<bool> {
        self.inner.nodelay()
    }

    /// The remote end.
    #[cfg(test)]
    pub fn peer_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.inner.peer_addr()
    }

    fn cut_off(&mut self) -> bool {
        let generation = self.cooldowns.generation();
        if generation == self.seen {
            return false;
        }
        self.seen = generation;
        self.address
            .is_some_and(|a| self.cooldowns.cooling(a, Instant::now()))
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.closing.is_none() && self.cut_off() {
            self.closing = Some(Box::pin(tokio::time::sleep(GRACE)));
        }
        match &mut self.closing {
            None => Pin::new(&mut self.inner).poll_read(cx, buf),
            Some(closing) => {
                std::task::ready!(closing.as_mut().poll(cx));
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "this address sent a message over --max-message-bytes and is cooling down",
                )))
            }
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Connected for Connection {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    #[test]
    fn each_offence_doubles_the_cooldown_up_to_the_longest() {
        let cooldowns = Cooldowns::new(Duration::from_secs(1));
        let mut now = Instant::now();
        let mut given = Vec::new();
        for _ in 0..9 {
            given.push(cooldowns.offence(A, now).unwrap().as_secs());
            now += Duration::from_secs(1);
        }
        assert_eq!(given, [1, 2, 4, 8, 16, 32, 64, 64, 64]);
    }

    #[test]
    fn an_address_cools_down_alone_and_for_its_cooldown_only() {
        let cooldowns = Cooldowns::new(Duration::from_secs(1));
        let now = Instant::now();
        cooldowns.offence(A, now);
        assert!(cooldowns.cooling(A, now + Duration::from_millis(999)));
        assert!(!cooldowns.cooling(A, now + Duration::from_secs(1)));
        assert!(!cooldowns.cooling(B, now));
    }

    #[test]
    fn an_address_without_offence_for_a_while_starts_over() {
        let cooldowns = Cooldowns::new(Duration::from_secs(1));
        let now = Instant::now();
        cooldowns.offence(A, now);
        cooldowns.offence(A, now);
        let later = now + Duration::from_secs(2) + FORGIVE;
        assert_eq!(cooldowns.offence(A, later), Some(Duration::from_secs(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_connection_of_an_address_cooling_down_is_read_no_more_then_closed() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket
            .bind(std::net::SocketAddr::from(([127, 0, 0, 2], 0)))
            .unwrap();
        let mut client = socket
            .connect(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
            .await
            .unwrap();
        let cooldowns = Arc::new(Cooldowns::new(Duration::from_secs(60)));
        let (accepted, _) = listener.accept().await.unwrap();
        let mut connection = Connection::accept(accepted, cooldowns.clone()).unwrap();
        let mut buf = [0u8; 16];

        client.write_all(b"before").await.unwrap();
        assert_eq!(connection.read(&mut buf).await.unwrap(), 6);

        cooldowns.offence("127.0.0.2".parse().unwrap(), Instant::now());
        client.write_all(b"after").await.unwrap();
        let began = Instant::now();
        let read = connection.read(&mut buf).await;
        assert_eq!(read.unwrap_err().kind(), io::ErrorKind::ConnectionAborted);
        assert!(began.elapsed() >= GRACE, "closed before its grace");
        // Writing is never held back: the leader's last words go out.
        connection.write_all(b"status").await.unwrap();
        assert_eq!(client.read(&mut buf).await.unwrap(), 6);
    }

    #[test]
    fn every_offence_tells_open_connections_to_look() {
        let cooldowns = Cooldowns::new(Duration::from_secs(1));
        let before = cooldowns.generation();
        cooldowns.offence(A, Instant::now());
        assert_ne!(cooldowns.generation(), before);
    }
}
