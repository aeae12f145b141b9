//! The RDM endpoint's trait impls: messages, tagged, RMA, atomics, CM, and the endpoint itself.

#[allow(clippy::wildcard_imports)]
use super::*;

impl RdmEndpoint {
    fn report(b: &Binds, flags: OpFlags) -> bool {
        !b.tx_selective || flags.contains(OpFlags::COMPLETION)
    }

    fn inject_any(
        &self,
        buf: &[u8],
        dest: FiAddr,
        tag: Option<u64>,
        data: Option<u64>,
    ) -> Result<()> {
        let (e, _) = self.engine()?;
        if buf.len() > crate::getinfo::RDM_INJECT_SIZE {
            return Err(Error::new(
                ErrorKind::MsgSize,
                format!(
                    "verbs: {} bytes exceed the inject size {}",
                    buf.len(),
                    crate::getinfo::RDM_INJECT_SIZE
                ),
            ));
        }
        let mut one = NO_IOV;
        let user = UserIov::of_slice(buf, &mut one);
        let msg = Msg {
            iov: user.pieces(),
            desc: &[],
            addr: dest,
            tag: tag.unwrap_or(0),
            ignore: 0,
            context: 0,
            data: data.unwrap_or(0),
        };
        let flags = if data.is_some() {
            OpFlags::REMOTE_CQ_DATA
        } else {
            OpFlags::empty()
        };
        // Eager data is copied before the call returns.
        e.send(&msg, &user, flags, tag.is_some(), false)
    }
}

impl MsgOps for RdmEndpoint {
    fn inject(&self, buf: &[u8], dest: FiAddr, data: Option<u64>) -> Result<()> {
        self.inject_any(buf, dest, None, data)
    }

    #[allow(unsafe_code)]
    unsafe fn sendmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        let (e, b) = self.engine()?;
        // SAFETY: the caller keeps the buffers valid until the completion
        // (the trait's contract).
        let user = unsafe { UserIov::new(msg.iov) };
        e.send(msg, &user, flags, false, Self::report(b, flags))
    }

    #[allow(unsafe_code)]
    unsafe fn recvmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        let (e, b) = self.engine()?;
        // SAFETY: the buffer is the caller's until the completion (the
        // trait's contract); the engine writes it no later.
        let msg = unsafe { UserMsg::new(msg) };
        e.recv(b, &msg, flags, false)
    }
}

impl TaggedOps for RdmEndpoint {
    fn tinject(&self, buf: &[u8], dest: FiAddr, tag: u64, data: Option<u64>) -> Result<()> {
        self.inject_any(buf, dest, Some(tag), data)
    }

    #[allow(unsafe_code)]
    unsafe fn tsendmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        let (e, b) = self.engine()?;
        // SAFETY: the caller keeps the buffers valid until the completion
        // (the trait's contract).
        let user = unsafe { UserIov::new(msg.iov) };
        e.send(msg, &user, flags, true, Self::report(b, flags))
    }

    #[allow(unsafe_code)]
    unsafe fn trecvmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
        let (e, b) = self.engine()?;
        // SAFETY: the buffer is the caller's until the completion (the
        // trait's contract); the engine writes it no later.
        let msg = unsafe { UserMsg::new(msg) };
        e.recv(b, &msg, flags, true)
    }
}

fn rkey(key: u64) -> Result<u32> {
    u32::try_from(key).map_err(|_| {
        Error::new(
            ErrorKind::NoKey,
            format!("verbs: {key:#x} is not a verbs memory key (32 bits)"),
        )
    })
}

impl RmaOps for RdmEndpoint {
    fn inject_write(
        &self,
        buf: &[u8],
        dest: FiAddr,
        remote: fabric_core::objects::RmaIov,
        data: Option<u64>,
    ) -> Result<()> {
        if buf.len() > crate::getinfo::RDM_INJECT_SIZE {
            return Err(Error::new(
                ErrorKind::MsgSize,
                "verbs: inject_write exceeds the inject size",
            ));
        }
        let mut one = NO_IOV;
        let user = UserIov::of_slice(buf, &mut one);
        let rma = [remote];
        let msg = RmaMsg {
            iov: user.pieces(),
            desc: &[],
            addr: dest,
            rma_iov: &rma,
            context: 0,
            data: data.unwrap_or(0),
        };
        let flags = if data.is_some() {
            OpFlags::REMOTE_CQ_DATA
        } else {
            OpFlags::empty()
        };
        // Data up to the inject size is staged (copied) before the call
        // returns.
        self.rma(&msg, &user, flags, true, false)
    }

    #[allow(unsafe_code)]
    unsafe fn readmsg(&self, msg: &RmaMsg<'_>, flags: OpFlags) -> Result<()> {
        let (_, b) = self.engine()?;
        // SAFETY: the caller keeps the buffers valid until the completion
        // (the trait's contract).
        let user = unsafe { UserIov::new(msg.iov) };
        self.rma(msg, &user, flags, false, Self::report(b, flags))
    }

    #[allow(unsafe_code)]
    unsafe fn writemsg(&self, msg: &RmaMsg<'_>, flags: OpFlags) -> Result<()> {
        let (_, b) = self.engine()?;
        // SAFETY: the caller keeps the buffers valid until the completion
        // (the trait's contract).
        let user = unsafe { UserIov::new(msg.iov) };
        self.rma(msg, &user, flags, true, Self::report(b, flags))
    }
}

impl RdmEndpoint {
    /// An RMA read or write of the caller's buffers `user`.
    fn rma(
        &self,
        msg: &RmaMsg<'_>,
        user: &UserIov<'_>,
        flags: OpFlags,
        write: bool,
        report: bool,
    ) -> Result<()> {
        let (dir, what) = if write {
            (Caps::WRITE, "an RMA write")
        } else {
            (Caps::READ, "an RMA read")
        };
        fabric_core::kit::caps::initiate(self.inner.info.caps, Caps::RMA, dir, "verbs", what)?;
        let (e, _) = self.engine()?;
        let [remote] = msg.rma_iov else {
            return Err(Error::inval(format!(
                "verbs: {} remote ranges; rma_iov_limit is 1",
                msg.rma_iov.len()
            )));
        };
        let key = rkey(remote.key)?;
        let len = user.len()?;
        let imm = if write && flags.contains(OpFlags::REMOTE_CQ_DATA) {
            Some(crate::ep::imm(msg.data)?)
        } else {
            None
        };
        let mut st = e.lock();
        e.tx_admit(&mut st)?;
        if st.tx_free.is_empty() {
            e.progress_locked(&mut st, false)?;
        }
        let (sge, mr, stage, copy_back) = e.rma_local(&mut st, user, msg.desc, write)?;
        let op = RmaOp {
            conn: 0,
            context: msg.context,
            flags: CompletionFlags::RMA
                | if write {
                    CompletionFlags::WRITE
                } else {
                    CompletionFlags::READ
                },
            len,
            report,
            _mr: mr,
            copy_back,
            stage,
        };
        let wr = RmaWr {
            op: if write {
                Opcode::write(imm)
            } else {
                Opcode::Read
            },
            remote_addr: remote.addr,
            rkey: key,
            sge,
        };
        e.post_rma(&mut st, msg.addr, op, wr, flags.contains(OpFlags::FENCE))
    }
}

impl AtomicOps for RdmEndpoint {
    fn atomic_valid(
        &self,
        datatype: Datatype,
        op: AtomicOp,
        fetch: bool,
        compare: bool,
    ) -> Result<usize> {
        crate::ep::msg::atomic_count(&self.inner.domain.limits, datatype, op, fetch, compare)
    }

    #[allow(unsafe_code)]
    unsafe fn atomicmsg(&self, msg: &AtomicMsg<'_>, flags: OpFlags) -> Result<()> {
        // SAFETY: the caller keeps the buffers valid until the completion
        // (the trait's contract).
        let bufs = unsafe { AtomicBufs::of(msg) };
        self.atomic(&bufs, msg, flags)
    }
}

impl RdmEndpoint {
    fn atomic(&self, bufs: &AtomicBufs<'_>, msg: &AtomicMsg<'_>, flags: OpFlags) -> Result<()> {
        let fetch = !msg.result.is_empty();
        let dir = if fetch { Caps::READ } else { Caps::WRITE };
        fabric_core::kit::caps::initiate(
            self.inner.info.caps,
            Caps::ATOMIC,
            dir,
            "verbs",
            "an atomic",
        )?;
        let (e, b) = self.engine()?;
        let compare = !msg.compare.is_empty();
        self.atomic_valid(msg.datatype, msg.op, fetch, compare)?;
        let [remote] = msg.rma_iov else {
            return Err(Error::inval("verbs: a verbs atomic has one remote range"));
        };
        if remote.len != 1 || remote.addr % 8 != 0 {
            return Err(Error::inval(
                "verbs: a verbs atomic updates one 8-byte aligned element",
            ));
        }
        let key = rkey(remote.key)?;
        let operand = if msg.op == AtomicOp::AtomicRead {
            0
        } else {
            bufs.operand.read_u64("operand")?
        };
        let cmp = if compare {
            bufs.compare.read_u64("compare value")?
        } else {
            0
        };
        let result = match (fetch, bufs.result.dst(8)) {
            (false, _) => None,
            (true, Some(d)) => Some(d),
            (true, None) => {
                return Err(Error::inval(
                    "verbs: the result of a verbs atomic is one 8-byte element",
                ));
            }
        };
        let mut st = e.lock();
        e.tx_admit(&mut st)?;
        if st.tx_free.is_empty() {
            e.progress_locked(&mut st, false)?;
        }
        let Some(slot) = st.tx_free.pop() else {
            return Err(again("verbs: every send buffer is in use"));
        };
        st.tx[slot].kind = TxKind::Stage;
        let op = RmaOp {
            conn: 0,
            context: msg.context,
            flags: CompletionFlags::ATOMIC
                | if fetch {
                    CompletionFlags::READ
                } else {
                    CompletionFlags::WRITE
                },
            len: 8,
            report: Self::report(b, flags),
            _mr: None,
            copy_back: result.map(|r| (slot, r)),
            stage: Some(slot),
        };
        let wr = RmaWr {
            op: if msg.op == AtomicOp::Cswap {
                Opcode::CmpSwap(cmp, operand)
            } else {
                Opcode::FetchAdd(operand)
            },
            remote_addr: remote.addr,
            rkey: key,
            sge: e.tx_pool.sge(slot, 8),
        };
        e.post_rma(&mut st, msg.addr, op, wr, flags.contains(OpFlags::FENCE))
    }
}

impl CmOps for RdmEndpoint {
    fn getname(&self) -> Result<Address> {
        Ok(Address::from(self.inner.name))
    }

    fn getpeer(&self) -> Result<Address> {
        Err(Error::new(
            ErrorKind::OpNotSupp,
            "verbs: RDM endpoints have no single peer",
        ))
    }
}

impl Endpoint for RdmEndpoint {
    fn info(&self) -> &Info {
        &self.inner.info
    }

    fn bind(&self, what: Bind<'_>) -> Result<()> {
        crate::ep::bind_pending(
            &self.inner.binds,
            &self.inner.pending,
            what,
            crate::ep::RDM_ACCEPTS,
        )
    }

    fn enable(&self) -> Result<()> {
        let e = &self.inner;
        let enable = || {
            let me: Arc<dyn Progress> = e.clone();
            crate::ep::enable_pending(&e.binds, &e.pending, me, true, "an RDM endpoint")?;
            e.binds.get().cloned().ok_or_else(crate::ep::not_enabled)
        };
        match e.srx.get() {
            Some(srx) => {
                if e.binds.get().is_some() {
                    return Err(crate::ep::already_enabled());
                }
                let pending = lock(&e.pending).clone();
                srx.enable_member(e.ep_no, &pending, enable)
            }
            None if e.info.ep_attr.rx_ctx_cnt == fabric_core::SHARED_CONTEXT => Err(Error::inval(
                "verbs: an endpoint opened with rx_ctx_cnt = FI_SHARED_CONTEXT needs a shared \
                 receive context bound before enable",
            )),
            None => enable().map(|_| ()),
        }
    }

    fn cancel(&self, context: u64) -> Result<()> {
        if self.inner.srx.get().is_some() {
            return Err(shared_rx());
        }
        let Some(b) = self.inner.binds.get() else {
            return Err(crate::ep::not_enabled());
        };
        self.inner.cancel_recv(b, context)
    }

    fn min_multi_recv(&self) -> Result<usize> {
        Ok(self.inner.min_multi.load(Ordering::Relaxed))
    }

    fn set_min_multi_recv(&self, bytes: usize) -> Result<()> {
        if self.inner.srx.get().is_some() {
            return Err(shared_rx());
        }
        self.inner.set_min_multi_recv(bytes);
        Ok(())
    }

    fn bind_srx(&self, srx: &dyn fabric_core::objects::SharedRx) -> Result<()> {
        if self.inner.binds.get().is_some() {
            return Err(Error::new(ErrorKind::OpBadState, "bind after enable"));
        }
        let srx = srx.as_any().downcast_ref::<VerbsSrx>().ok_or_else(|| {
            Error::inval("verbs: bind of a shared receive context of another provider")
        })?;
        srx.attach(&self.inner)
    }
}

/// The refusal of an endpoint's own receive calls while it is bound to a
/// shared receive context.
pub(super) fn shared_rx() -> Error {
    Error::new(
        ErrorKind::OpNotSupp,
        "verbs: the endpoint receives through its shared receive context; use the context",
    )
}
