//! Identify during bring-up: the controller (checked as a host must: cntlid, MAXCMD, KAS,
//! capsule sizes, keyed SGLs) and every active namespace with its identifiers (the
//! Namespace Identification Descriptor list where the target has one).

use rdmablk::nvme::identify::{
    cns, decode_ns_descriptors, decode_ns_list, NsDescriptor, IDENTIFY_LEN,
};
use rdmablk::nvme::{IdentifyCmd, IdentifyController, IdentifyNamespace};

use super::info::{non_zero, NamespaceIds, NamespaceInfo};
use super::Setup;
use crate::error::{Error, Result};
use crate::queue::Queue;

impl Setup<'_> {
    fn identify(&self, q: &mut Queue, cns: u8, nsid: u32) -> Result<Box<[u8; IDENTIFY_LEN]>> {
        let sqe = IdentifyCmd {
            cns,
            cntid: 0,
            csi: 0,
            nsid,
        }
        .to_sqe(0);
        let (_, data) =
            self.admin_cmd(q, sqe, Some((false, Vec::new(), IDENTIFY_LEN)), "Identify")?;
        let v = data.unwrap_or_default();
        let arr: Box<[u8; IDENTIFY_LEN]> = v
            .into_boxed_slice()
            .try_into()
            .map_err(|_| Error::protocol("Identify data of the wrong size"))?;
        Ok(arr)
    }

    pub(super) fn identify_controller(
        &self,
        q: &mut Queue,
        cntlid: u16,
    ) -> Result<IdentifyController> {
        let b = self.identify(q, cns::CONTROLLER, 0)?;
        let id = IdentifyController::decode(&b).map_err(Error::wire)?;
        id.check_fabrics(cntlid, self.fabric.sgl_need())
            .map_err(|e| Error::Controller {
                what: e.to_string(),
            })?;
        Ok(id)
    }

    pub(crate) fn identify_namespaces(&self, q: &mut Queue) -> Result<Vec<NamespaceInfo>> {
        let list = self.identify(q, cns::ACTIVE_NS_LIST, 0)?;
        let nsids = decode_ns_list(&list).map_err(Error::wire)?;
        let mut out = Vec::with_capacity(nsids.len());
        for nsid in nsids {
            let b = self.identify(q, cns::NAMESPACE, nsid)?;
            let ns = IdentifyNamespace::decode(&b);
            if ns.nsze == 0 {
                continue;
            }
            let block_size = ns.block_bytes().map_err(Error::wire)?;
            let mut ids = NamespaceIds {
                nguid: non_zero(ns.nguid),
                eui64: non_zero(ns.eui64),
                uuid: None,
            };
            // Targets before NVMe 1.3 have no descriptor list: the Identify fields stand.
            if let Ok(b) = self.identify(q, cns::NS_DESC_LIST, nsid) {
                for d in decode_ns_descriptors(&b).unwrap_or_default() {
                    match d {
                        NsDescriptor::Uuid(v) => ids.uuid = non_zero(v),
                        NsDescriptor::Nguid(v) => ids.nguid = ids.nguid.or(non_zero(v)),
                        NsDescriptor::Eui64(v) => ids.eui64 = ids.eui64.or(non_zero(v)),
                        NsDescriptor::Csi(_) => {}
                    }
                }
            }
            out.push(NamespaceInfo {
                nsid,
                block_size,
                blocks: ns.nsze,
                ids,
                ana_group: ns.anagrpid,
            });
        }
        Ok(out)
    }
}
