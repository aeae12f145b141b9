//! Bit sets: capabilities, modes, memory-registration modes, ordering, and
//! operation / getinfo flags. Bit values are libfabric 1.17's (`fabric.h`),
//! so a value can cross to and from C unchanged.

use crate::names::fi_flags;

fi_flags! {
    /// Endpoint capabilities (`fi_info.caps`, and the caps of the tx, rx and
    /// domain attributes).
    ///
    /// fi_getinfo(3) splits them into *primary* capabilities, which an
    /// application must request to get, and *secondary* ones, which a
    /// provider may report unrequested ([`Caps::PRIMARY`],
    /// [`Caps::SECONDARY`]); [`Caps::TX`], [`Caps::RX`] and [`Caps::DOMAIN`]
    /// are the bits that the transmit, receive and domain attributes may
    /// hold.
    ///
    /// # Two views: libfabric's and kfabric's
    ///
    /// `INJECT`, `REMOTE_CQ_DATA` and `CANCEL` ([`Caps::KFI`]) are
    /// capabilities in kfi_getinfo(3) only; libfabric 1.17 has them as
    /// operation flags (`FI_REMOTE_CQ_DATA` is bit 17 of `op_flags`), and its
    /// consumers reject them in `caps`. They use the bits of the libfabric
    /// flags of the same name (CANCEL an unused bit). Providers declare them
    /// in their offers; `getinfo` answers show them only to a caller who
    /// asks for them in the hints' caps (the kfabric view). Everything else,
    /// `fabric info`, its JSON and the C library, shows the libfabric view,
    /// where they never appear.
    pub struct Caps: u64, prefix "FI_" {
        /// Send and receive messages (`fi_msg`).
        const MSG = 1 << 1;
        /// RMA reads and writes (`fi_rma`).
        const RMA = 1 << 2;
        /// Tagged messages (`fi_tagged`).
        const TAGGED = 1 << 3;
        /// Atomic operations (`fi_atomic`).
        const ATOMIC = 1 << 4;
        /// Multicast transfers.
        const MULTICAST = 1 << 5;
        /// Collective operations.
        const COLLECTIVE = 1 << 6;
        /// Initiate reads of remote memory (with RMA and/or ATOMIC).
        const READ = 1 << 8;
        /// Initiate writes to remote memory (with RMA and/or ATOMIC).
        const WRITE = 1 << 9;
        /// Receive messages.
        const RECV = 1 << 10;
        /// Send messages.
        const SEND = 1 << 11;
        /// Be the target of remote reads (with RMA and/or ATOMIC).
        const REMOTE_READ = 1 << 12;
        /// Be the target of remote writes (with RMA and/or ATOMIC).
        const REMOTE_WRITE = 1 << 13;
        /// Support the FI_MULTI_RECV flag on receives.
        const MULTI_RECV = 1 << 16;
        /// kfi: support the FI_REMOTE_CQ_DATA flag (immediate data).
        const REMOTE_CQ_DATA = 1 << 17;
        /// Triggered operations.
        const TRIGGER = 1 << 20;
        /// Support the FI_FENCE flag on transfers.
        const FENCE = 1 << 21;
        /// kfi: outstanding transfers may be cancelled.
        const CANCEL = 1 << 23;
        /// kfi: support the FI_INJECT flag and the inject calls.
        const INJECT = 1 << 25;
        /// Domain: the application supplies its own fi_addr_t values.
        const AV_USER_ID = 1 << 41;
        /// Domain: peer-provider support.
        const PEER = 1 << 43;
        /// Transfers to and from device (heterogeneous) memory.
        const HMEM = 1 << 47;
        /// Receives of variable-sized messages.
        const VARIABLE_MSG = 1 << 48;
        /// RMA to persistent memory.
        const RMA_PMEM = 1 << 49;
        /// Report raw source addresses not in the AV (needs SOURCE).
        const SOURCE_ERR = 1 << 50;
        /// Communication with processes on this host.
        const LOCAL_COMM = 1 << 51;
        /// Communication with other hosts.
        const REMOTE_COMM = 1 << 52;
        /// Address vectors shared among processes.
        const SHARED_AV = 1 << 53;
        /// Completion events at the target of RMA and atomics.
        const RMA_EVENT = 1 << 56;
        /// Return the source address with completions.
        const SOURCE = 1 << 57;
        /// Initiators may name a receive context.
        const NAMED_RX_CTX = 1 << 58;
        /// Match receives on the source address.
        const DIRECTED_RECV = 1 << 59;
    }
}

impl Caps {
    /// Capabilities that must be requested to be enabled: fi_getinfo(3)'s
    /// primary list plus MULTICAST, COLLECTIVE, HMEM, VARIABLE_MSG and the
    /// domain capabilities AV_USER_ID and PEER that later man pages add.
    pub const PRIMARY: Caps = Caps::MSG
        .union(Caps::RMA)
        .union(Caps::TAGGED)
        .union(Caps::ATOMIC)
        .union(Caps::MULTICAST)
        .union(Caps::COLLECTIVE)
        .union(Caps::NAMED_RX_CTX)
        .union(Caps::DIRECTED_RECV)
        .union(Caps::READ)
        .union(Caps::WRITE)
        .union(Caps::RECV)
        .union(Caps::SEND)
        .union(Caps::REMOTE_READ)
        .union(Caps::REMOTE_WRITE)
        .union(Caps::HMEM)
        .union(Caps::VARIABLE_MSG)
        .union(Caps::AV_USER_ID)
        .union(Caps::PEER);

    /// Capabilities a provider may report without being asked:
    /// fi_getinfo(3)'s secondary list plus RMA_PMEM (libfabric 1.17's
    /// `OFI_SECONDARY_CAPS`).
    pub const SECONDARY: Caps = Caps::MULTI_RECV
        .union(Caps::SOURCE)
        .union(Caps::RMA_EVENT)
        .union(Caps::SHARED_AV)
        .union(Caps::TRIGGER)
        .union(Caps::FENCE)
        .union(Caps::LOCAL_COMM)
        .union(Caps::REMOTE_COMM)
        .union(Caps::SOURCE_ERR)
        .union(Caps::RMA_PMEM);

    /// kfi_getinfo(3)'s capabilities that libfabric has only as operation
    /// flags: reported only when the hints ask for them (see the type's
    /// doc, "Two views").
    pub const KFI: Caps = Caps::INJECT.union(Caps::REMOTE_CQ_DATA).union(Caps::CANCEL);

    /// Transfer directions of messages.
    pub const MSG_DIRECTIONS: Caps = Caps::SEND.union(Caps::RECV);
    /// Transfer directions of RMA and atomics.
    pub const RMA_DIRECTIONS: Caps = Caps::READ
        .union(Caps::WRITE)
        .union(Caps::REMOTE_READ)
        .union(Caps::REMOTE_WRITE);

    /// The capabilities a transmit attribute may hold (libfabric 1.17's
    /// `OFI_TX_CAPS`).
    pub const TX: Caps = Caps::MSG
        .union(Caps::RMA)
        .union(Caps::TAGGED)
        .union(Caps::ATOMIC)
        .union(Caps::MULTICAST)
        .union(Caps::NAMED_RX_CTX)
        .union(Caps::HMEM)
        .union(Caps::COLLECTIVE)
        .union(Caps::TRIGGER)
        .union(Caps::FENCE)
        .union(Caps::RMA_PMEM)
        .union(Caps::SEND)
        .union(Caps::READ)
        .union(Caps::WRITE);

    /// The capabilities a receive attribute may hold (libfabric 1.17's
    /// `OFI_RX_CAPS`).
    pub const RX: Caps = Caps::MSG
        .union(Caps::RMA)
        .union(Caps::TAGGED)
        .union(Caps::ATOMIC)
        .union(Caps::DIRECTED_RECV)
        .union(Caps::VARIABLE_MSG)
        .union(Caps::HMEM)
        .union(Caps::COLLECTIVE)
        .union(Caps::RMA_PMEM)
        .union(Caps::SOURCE)
        .union(Caps::SOURCE_ERR)
        .union(Caps::RMA_EVENT)
        .union(Caps::MULTI_RECV)
        .union(Caps::TRIGGER)
        .union(Caps::RECV)
        .union(Caps::REMOTE_READ)
        .union(Caps::REMOTE_WRITE);

    /// Capabilities that only describe the receive side; a transmit
    /// attribute's hint ignores them.
    pub const RX_ONLY: Caps = Caps::RX.difference(Caps::TX);

    /// Capabilities that only describe the transmit side; a receive
    /// attribute's hint ignores them.
    pub const TX_ONLY: Caps = Caps::TX.difference(Caps::RX);

    /// Capabilities that describe the domain rather than an endpoint: the
    /// bits a domain attribute may hold.
    pub const DOMAIN: Caps = Caps::AV_USER_ID
        .union(Caps::PEER)
        .union(Caps::SHARED_AV)
        .union(Caps::LOCAL_COMM)
        .union(Caps::REMOTE_COMM);
}

fi_flags! {
    /// Operational modes (`fi_info.mode`, and the tx / rx / domain modes):
    /// requirements the application accepts to follow. On input the bits the
    /// application supports; on output the bits the provider needs.
    pub struct Mode: u64, prefix "FI_" {
        /// Operation contexts must be `struct fi_context` owned by the caller.
        const CONTEXT = 1 << 59;
        /// Buffers carry `msg_prefix_size` bytes of provider space in front.
        const MSG_PREFIX = 1 << 58;
        /// IO vectors must stay valid until completion.
        const ASYNC_IOV = 1 << 57;
        /// Remote CQ data consumes a receive buffer at the target.
        const RX_CQ_DATA = 1 << 56;
        /// Local buffers must be registered (legacy, see [`MrMode::LOCAL`]).
        const LOCAL_MR = 1 << 55;
        /// Completion flags may only report remote notifications.
        const NOTIFY_FLAGS_ONLY = 1 << 54;
        /// CQs and counters are shared only among like-capable endpoints.
        const RESTRICTED_COMP = 1 << 53;
        /// Like CONTEXT, with a context twice the size.
        const CONTEXT2 = 1 << 52;
        /// Received data is buffered by the provider (peer API).
        const BUFFERED_RECV = 1 << 51;
    }
}

fi_flags! {
    /// Memory-registration modes of a domain (`domain_attr.mr_mode`).
    pub struct MrMode: u32, prefix "FI_MR_" {
        /// Legacy basic mode (API < 1.5): provider keys, virtual addresses.
        const BASIC = 1 << 0;
        /// Legacy scalable mode (API < 1.5): user keys, offsets.
        const SCALABLE = 1 << 1;
        /// Local buffers must be registered.
        const LOCAL = 1 << 2;
        /// Keys are raw byte strings (`fi_mr_raw_attr`).
        const RAW = 1 << 3;
        /// RMA addresses are virtual addresses, not offsets.
        const VIRT_ADDR = 1 << 4;
        /// Registered memory must be backed by allocated pages.
        const ALLOCATED = 1 << 5;
        /// The provider chooses the keys.
        const PROV_KEY = 1 << 6;
        /// The application reports unmapped memory.
        const MMU_NOTIFY = 1 << 7;
        /// Regions must be bound to counters / CQs for RMA events.
        const RMA_EVENT = 1 << 8;
        /// Regions are bound to endpoints.
        const ENDPOINT = 1 << 9;
        /// Device memory must be registered.
        const HMEM = 1 << 10;
        /// Regions used with collectives must be registered for them.
        const COLLECTIVE = 1 << 11;
    }
}

impl MrMode {
    /// The two legacy modes of API versions before 1.5.
    pub const LEGACY: MrMode = MrMode::BASIC.union(MrMode::SCALABLE);
}

fi_flags! {
    /// Message ordering (`tx_attr.msg_order`, `rx_attr.msg_order`).
    /// `FI_ORDER_NONE` is the empty set.
    pub struct MsgOrder: u64, prefix "FI_ORDER_" {
        /// Read after read.
        const RAR = 1 << 0;
        /// Read after write.
        const RAW = 1 << 1;
        /// Read after send.
        const RAS = 1 << 2;
        /// Write after read.
        const WAR = 1 << 3;
        /// Write after write.
        const WAW = 1 << 4;
        /// Write after send.
        const WAS = 1 << 5;
        /// Send after read.
        const SAR = 1 << 6;
        /// Send after write.
        const SAW = 1 << 7;
        /// Send after send.
        const SAS = 1 << 8;
        /// Data placement in order of the transfers.
        const DATA = 1 << 16;
        /// RMA read after read.
        const RMA_RAR = 1 << 32;
        /// RMA read after write.
        const RMA_RAW = 1 << 33;
        /// RMA write after read.
        const RMA_WAR = 1 << 34;
        /// RMA write after write.
        const RMA_WAW = 1 << 35;
        /// Atomic read after read.
        const ATOMIC_RAR = 1 << 36;
        /// Atomic read after write.
        const ATOMIC_RAW = 1 << 37;
        /// Atomic write after read.
        const ATOMIC_WAR = 1 << 38;
        /// Atomic write after write.
        const ATOMIC_WAW = 1 << 39;
    }
}

impl MsgOrder {
    /// `FI_ORDER_STRICT`: every one of the nine basic orderings.
    pub const STRICT: MsgOrder = MsgOrder::from_bits_truncate(0x1ff);
}

fi_flags! {
    /// Completion ordering (`tx_attr.comp_order`, `rx_attr.comp_order`).
    /// `FI_ORDER_NONE` is the empty set.
    pub struct CompOrder: u64, prefix "FI_ORDER_" {
        /// Completions are reported in the order operations were submitted.
        const STRICT = 0x1ff;
        /// Data is placed in order, even if completions are not.
        const DATA = 1 << 16;
    }
}

fi_flags! {
    /// Operation flags: default flags of a tx / rx attribute (`op_flags`)
    /// and per-operation flags of `sendmsg`, `recvmsg`, `writemsg`, ...
    pub struct OpFlags: u64, prefix "FI_" {
        /// The receive buffer takes several messages.
        const MULTI_RECV = 1 << 16;
        /// The transfer carries remote CQ data.
        const REMOTE_CQ_DATA = 1 << 17;
        /// More operations follow right away (a batching hint).
        const MORE = 1 << 18;
        /// Tagged receive: look for a matching message without taking it.
        const PEEK = 1 << 19;
        /// A triggered operation.
        const TRIGGER = 1 << 20;
        /// Start only after all earlier operations to the peer completed.
        const FENCE = 1 << 21;
        /// Generate a completion (with selective completion).
        const COMPLETION = 1 << 24;
        /// The buffer may be reused as soon as the call returns.
        const INJECT = 1 << 25;
        /// Complete once the buffer may be reused.
        const INJECT_COMPLETE = 1 << 26;
        /// Complete once the transfer left the initiator's transport.
        const TRANSMIT_COMPLETE = 1 << 27;
        /// Complete once the data is visible at the target.
        const DELIVERY_COMPLETE = 1 << 28;
        /// Complete once the data is persistent at the target.
        const COMMIT_COMPLETE = 1 << 30;
        /// Complete once the message matched a receive at the target.
        const MATCH_COMPLETE = 1 << 31;
        /// Tagged receive: claim a message found earlier with PEEK.
        const CLAIM = 1 << 59;
        /// Tagged receive: drop the claimed / peeked message.
        const DISCARD = 1 << 58;
    }
}

fi_flags! {
    /// Flags of the `getinfo` call itself.
    pub struct GetinfoFlags: u64, prefix "FI_" {
        /// The node is numeric: no name lookup.
        const NUMERICHOST = 1 << 55;
        /// Node and service name the local (source) side.
        const SOURCE = 1 << 57;
        /// List the providers only, one entry each.
        const PROV_ATTR_ONLY = 1 << 54;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let c = Caps::MSG | Caps::TAGGED | Caps::REMOTE_CQ_DATA;
        assert_eq!(c.to_string(), "FI_MSG|FI_TAGGED|FI_REMOTE_CQ_DATA");
        assert_eq!(c.to_string().parse::<Caps>(), Ok(c));
        assert_eq!("fi_msg | FI_rma".parse::<Caps>(), Ok(Caps::MSG | Caps::RMA));
        assert!("FI_BOGUS".parse::<Caps>().is_err());
        assert_eq!(MsgOrder::SAS.to_string(), "FI_ORDER_SAS");
        assert_eq!("FI_MR_LOCAL".parse::<MrMode>(), Ok(MrMode::LOCAL));
    }

    #[test]
    fn unnamed_bits_survive() {
        let c = Caps::from_bits_retain(Caps::MSG.bits() | (1 << 62));
        let s = c.to_string();
        assert_eq!(s, "FI_MSG|0x4000000000000000");
        assert_eq!(s.parse::<Caps>(), Ok(c));
    }

    #[test]
    fn classes_partition_the_named_caps() {
        assert!(Caps::PRIMARY.intersection(Caps::SECONDARY).is_empty());
        assert!(
            Caps::KFI
                .intersection(Caps::PRIMARY | Caps::SECONDARY)
                .is_empty()
        );
        assert_eq!(Caps::PRIMARY | Caps::SECONDARY | Caps::KFI, Caps::all());
    }

    #[test]
    fn queue_classes_are_libfabric_1_17s() {
        // Every endpoint capability belongs to a side; the kfi bits and
        // the domain bits to none.
        let endpoint = (Caps::PRIMARY | Caps::SECONDARY) - Caps::DOMAIN;
        assert_eq!(Caps::TX | Caps::RX, endpoint);
        assert!(
            (Caps::TX | Caps::RX)
                .intersection(Caps::KFI | Caps::DOMAIN)
                .is_empty()
        );
        assert_eq!(
            Caps::RX_ONLY,
            Caps::DIRECTED_RECV
                | Caps::VARIABLE_MSG
                | Caps::SOURCE
                | Caps::SOURCE_ERR
                | Caps::RMA_EVENT
                | Caps::MULTI_RECV
                | Caps::RECV
                | Caps::REMOTE_READ
                | Caps::REMOTE_WRITE
        );
    }

    #[test]
    fn bit_values_match_libfabric() {
        assert_eq!(Caps::DIRECTED_RECV.bits(), 1 << 59);
        assert_eq!(Mode::CONTEXT.bits(), 1 << 59);
        assert_eq!(MsgOrder::STRICT.bits(), 0x1ff);
        assert_eq!(GetinfoFlags::SOURCE.bits(), Caps::SOURCE.bits());
        assert_eq!(OpFlags::INJECT.bits(), Caps::INJECT.bits());
    }
}
