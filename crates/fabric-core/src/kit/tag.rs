//! Tag matching: posted receives against arriving messages, and the
//! unexpected queue for messages that arrive before a matching receive.
//!
//! A receive `(tag, ignore, src)` matches a message `(msg_tag, msg_src)`
//! when the tags agree outside the ignored bits and, with directed receive,
//! the source is the one asked for (`FiAddr::UNSPEC` takes any source).
//! Untagged messages use tag 0 and ignore nothing. Both queues keep arrival
//! order, so among matching candidates the oldest wins, as fi_tagged(3)
//! requires.
//!
//! FI_PEEK looks at the unexpected queue without taking; FI_PEEK|FI_CLAIM
//! reserves the message found for a later FI_CLAIM receive with the same
//! context; FI_DISCARD drops it.

use std::collections::VecDeque;

use crate::objects::FiAddr;

/// Whether a receive matches a message.
#[inline]
pub fn matches(tag: u64, ignore: u64, want: FiAddr, msg_tag: u64, msg_src: FiAddr) -> bool {
    (tag & !ignore) == (msg_tag & !ignore) && (want == FiAddr::UNSPEC || want == msg_src)
}

/// A posted receive and what the provider needs to complete it.
#[derive(Debug)]
pub struct Posted<R> {
    /// Tag to match.
    pub tag: u64,
    /// Bits of the tag to ignore.
    pub ignore: u64,
    /// Source to match (`UNSPEC`: any).
    pub src: FiAddr,
    /// The receive (buffer, context, flags, ...).
    pub recv: R,
}

/// A message that arrived with no matching receive.
#[derive(Debug)]
pub struct Unexpected<M> {
    /// Its tag.
    pub tag: u64,
    /// Its source.
    pub src: FiAddr,
    /// Context of the FI_PEEK|FI_CLAIM that reserved it, if any.
    pub claimed_by: Option<u64>,
    /// The message (its data, or how to fetch it).
    pub msg: M,
}

/// Posted and unexpected queues of one receive context.
#[derive(Debug)]
pub struct Matcher<R, M> {
    posted: VecDeque<Posted<R>>,
    unexpected: VecDeque<Unexpected<M>>,
    directed: bool,
}

/// Removes entry `i`: the head (the usual match) by `pop_front`, which
/// is a few instructions where `remove` first works out which half to
/// shift.
fn take<T>(q: &mut VecDeque<T>, i: usize) -> Option<T> {
    if i == 0 { q.pop_front() } else { q.remove(i) }
}

impl<R, M> Matcher<R, M> {
    /// Empty queues. `directed`: FI_DIRECTED_RECV is enabled, so a
    /// receive's source takes part in matching; otherwise it is ignored.
    pub fn new(directed: bool) -> Self {
        Matcher {
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
            directed,
        }
    }

    fn want(&self, src: FiAddr) -> FiAddr {
        if self.directed { src } else { FiAddr::UNSPEC }
    }

    /// Posts a receive. If an unclaimed unexpected message matches, it is
    /// taken and returned with the receive instead of queueing it.
    #[inline]
    pub fn post(&mut self, p: Posted<R>) -> Option<(Posted<R>, Unexpected<M>)> {
        if self.unexpected.is_empty() {
            self.posted.push_back(p);
            return None;
        }
        self.post_search(p)
    }

    /// [`post`](Matcher::post) with unexpected messages kept: the oldest
    /// unclaimed one that matches, if any, else the receive is queued.
    fn post_search(&mut self, p: Posted<R>) -> Option<(Posted<R>, Unexpected<M>)> {
        let want = self.want(p.src);
        let found = self
            .unexpected
            .iter()
            .position(|u| u.claimed_by.is_none() && matches(p.tag, p.ignore, want, u.tag, u.src));
        match found.and_then(|i| take(&mut self.unexpected, i)) {
            Some(u) => Some((p, u)),
            None => {
                self.posted.push_back(p);
                None
            }
        }
    }

    /// A message arrived: takes the oldest matching posted receive, or
    /// `None` (then the caller keeps the message with
    /// [`push_unexpected`](Matcher::push_unexpected)).
    #[inline]
    pub fn arrive(&mut self, tag: u64, src: FiAddr) -> Option<Posted<R>> {
        // The oldest receive matches, mostly (untagged receives match any
        // message): no search, no position to work out.
        if self.hit(self.posted.front()?, tag, src) {
            return self.posted.pop_front();
        }
        self.arrive_search(tag, src)
    }

    /// Whether posted receive `p` takes a message with `tag` from `src`.
    #[inline]
    fn hit(&self, p: &Posted<R>, tag: u64, src: FiAddr) -> bool {
        let want = if self.directed { p.src } else { FiAddr::UNSPEC };
        matches(p.tag, p.ignore, want, tag, src)
    }

    /// [`arrive`](Matcher::arrive) past the oldest receive.
    fn arrive_search(&mut self, tag: u64, src: FiAddr) -> Option<Posted<R>> {
        let i = self
            .posted
            .iter()
            .skip(1)
            .position(|p| self.hit(p, tag, src))?;
        self.posted.remove(i + 1)
    }

    /// Keeps a message that matched no receive.
    pub fn push_unexpected(&mut self, tag: u64, src: FiAddr, msg: M) {
        self.unexpected.push_back(Unexpected {
            tag,
            src,
            claimed_by: None,
            msg,
        });
    }

    /// FI_PEEK: the oldest unclaimed matching unexpected message, left in
    /// place. With `claim`, it is reserved for `context`.
    pub fn peek(
        &mut self,
        tag: u64,
        ignore: u64,
        src: FiAddr,
        claim: Option<u64>,
    ) -> Option<&Unexpected<M>> {
        let want = self.want(src);
        let u = self
            .unexpected
            .iter_mut()
            .find(|u| u.claimed_by.is_none() && matches(tag, ignore, want, u.tag, u.src))?;
        if claim.is_some() {
            u.claimed_by = claim;
        }
        Some(u)
    }

    /// FI_CLAIM (or FI_DISCARD): takes the message reserved for `context`.
    pub fn claim(&mut self, context: u64) -> Option<Unexpected<M>> {
        let i = self
            .unexpected
            .iter()
            .position(|u| u.claimed_by == Some(context))?;
        self.unexpected.remove(i)
    }

    /// Takes the oldest unclaimed matching unexpected message (FI_DISCARD
    /// without a claim, or a receive that found its message).
    pub fn take_unexpected(&mut self, tag: u64, ignore: u64, src: FiAddr) -> Option<Unexpected<M>> {
        let want = self.want(src);
        let i = self
            .unexpected
            .iter()
            .position(|u| u.claimed_by.is_none() && matches(tag, ignore, want, u.tag, u.src))?;
        take(&mut self.unexpected, i)
    }

    /// Removes the first posted receive for which `pred` holds (fi_cancel).
    pub fn cancel(&mut self, pred: impl Fn(&R) -> bool) -> Option<Posted<R>> {
        let i = self.posted.iter().position(|p| pred(&p.recv))?;
        self.posted.remove(i)
    }

    /// Puts a receive back at the head of the posted queue, where it was
    /// taken from by [`arrive`](Matcher::arrive): a multi-receive buffer
    /// with room left keeps its place.
    pub fn repost_front(&mut self, p: Posted<R>) {
        self.posted.push_front(p);
    }

    /// Removes and returns the oldest unexpected message for which `pred`
    /// holds, claimed or not (a peer that went away, a message whose data
    /// became available).
    pub fn remove_unexpected(
        &mut self,
        pred: impl Fn(&Unexpected<M>) -> bool,
    ) -> Option<Unexpected<M>> {
        let i = self.unexpected.iter().position(pred)?;
        self.unexpected.remove(i)
    }

    /// Removes every posted receive (endpoint close, peer failure).
    pub fn drain_posted(&mut self) -> impl Iterator<Item = Posted<R>> + '_ {
        self.posted.drain(..)
    }

    /// Removes the unexpected messages for which `pred` holds (a peer that
    /// went away).
    pub fn drop_unexpected(&mut self, pred: impl Fn(&Unexpected<M>) -> bool) {
        self.unexpected.retain(|u| !pred(u));
    }

    /// Number of posted receives.
    pub fn posted_len(&self) -> usize {
        self.posted.len()
    }

    /// Number of unexpected messages.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(
        m: &mut Matcher<u64, &'static str>,
        tag: u64,
        ignore: u64,
        src: u64,
        ctx: u64,
    ) -> Option<&'static str> {
        m.post(Posted {
            tag,
            ignore,
            src: FiAddr(src),
            recv: ctx,
        })
        .map(|(_, u)| u.msg)
    }

    #[test]
    fn tags_ignore_bits_and_order() {
        let mut m: Matcher<u64, &str> = Matcher::new(false);
        assert!(post(&mut m, 0x10, 0x0f, 0, 1).is_none());
        assert!(post(&mut m, 0x10, 0, 0, 2).is_none());
        // 0x13 matches the first (ignore 0x0f), not the second.
        assert_eq!(m.arrive(0x13, FiAddr(5)).map(|p| p.recv), Some(1));
        assert_eq!(m.arrive(0x13, FiAddr(5)).map(|p| p.recv), None);
        assert_eq!(m.arrive(0x10, FiAddr(5)).map(|p| p.recv), Some(2));
    }

    #[test]
    fn unexpected_then_post_and_directed() {
        let mut m: Matcher<u64, &str> = Matcher::new(true);
        m.push_unexpected(7, FiAddr(1), "from 1");
        m.push_unexpected(7, FiAddr(2), "from 2");
        assert_eq!(post(&mut m, 7, 0, 2, 9), Some("from 2"));
        assert_eq!(post(&mut m, 7, 0, u64::MAX, 9), Some("from 1"));
        assert!(post(&mut m, 7, 0, 3, 9).is_none());
        assert_eq!(m.arrive(7, FiAddr(4)).map(|p| p.recv), None);
        assert_eq!(m.arrive(7, FiAddr(3)).map(|p| p.recv), Some(9));
    }

    #[test]
    fn undirected_ignores_the_source() {
        let mut m: Matcher<u64, &str> = Matcher::new(false);
        m.push_unexpected(7, FiAddr(1), "x");
        assert_eq!(post(&mut m, 7, 0, 3, 9), Some("x"));
    }

    #[test]
    fn peek_claim_discard() {
        let mut m: Matcher<u64, &str> = Matcher::new(false);
        m.push_unexpected(1, FiAddr(0), "a");
        m.push_unexpected(1, FiAddr(0), "b");
        assert_eq!(m.peek(1, 0, FiAddr::UNSPEC, None).map(|u| u.msg), Some("a"));
        assert_eq!(
            m.peek(1, 0, FiAddr::UNSPEC, Some(42)).map(|u| u.msg),
            Some("a")
        );
        // Claimed messages are invisible to others.
        assert_eq!(m.peek(1, 0, FiAddr::UNSPEC, None).map(|u| u.msg), Some("b"));
        assert_eq!(post(&mut m, 1, 0, 0, 5), Some("b"));
        assert_eq!(m.claim(42).map(|u| u.msg), Some("a"));
        assert_eq!(m.unexpected_len(), 0);
        m.push_unexpected(2, FiAddr(0), "c");
        assert_eq!(
            m.take_unexpected(2, 0, FiAddr::UNSPEC).map(|u| u.msg),
            Some("c")
        );
    }

    #[test]
    fn cancel() {
        let mut m: Matcher<u64, &str> = Matcher::new(false);
        post(&mut m, 1, 0, 0, 11);
        post(&mut m, 1, 0, 0, 12);
        assert_eq!(m.cancel(|ctx| *ctx == 12).map(|p| p.recv), Some(12));
        let p = m.arrive(1, FiAddr(0)).unwrap();
        assert_eq!(p.recv, 11);
        m.repost_front(p);
        m.push_unexpected(3, FiAddr(1), "x");
        m.push_unexpected(4, FiAddr(2), "y");
        assert_eq!(
            m.remove_unexpected(|u| u.src == FiAddr(2)).map(|u| u.msg),
            Some("y")
        );
        assert_eq!(m.unexpected_len(), 1);
        assert_eq!(m.posted_len(), 1);
        assert_eq!(m.drain_posted().count(), 1);
    }
}
