-- Wireshark dissector for the llc-stack transport (docs/PROTOCOL.md) and
-- the message-layer packets it carries (docs/MESSAGES.md).
--
-- Load it for one run:   tshark -X lua_script:tools/wireshark/llc_stack.lua -r capture.pcap
-- or for good: copy it into Wireshark's personal Lua plugin folder
-- (~/.local/lib/wireshark/plugins/ on Linux; Help > About > Folders shows it).
--
-- How frames reach it: our frames are IEEE 802.2 LLC UI frames (control 0x03)
-- addressed to our SAP (default 0x7C). Wireshark's LLC dissector hands the
-- information field of UI and I frames to the "llc.dsap" table, so the
-- transport registers there, on the SAP set in the preferences. Both forms of
-- frame arrive that way: the 802.3 length form (Ethernet length field, then
-- LLC) and the jumbo form (EtherType 0x8870, which Wireshark already decodes
-- as LLC). TEST and XID frames (llc-ping, reachability probes) are decoded by
-- Wireshark's own LLC dissector.
--
-- What it shows: every transport header field (llcstack.*), SACK blocks, the
-- CRC32C checked (a mismatch is an expert warning, llcstack.crc.bad; an
-- authenticated frame has no CRC and its tag needs the job's key, so its
-- status is "Unverified"),
-- retransmitted sequence numbers, messages reassembled from their fragments
-- and the message-layer header (llcmsg.*) of each message.

local DEFAULT_SAP = 0x7C
local HEADER_LEN = 56
local MSG_HEADER_LEN = 48
local TAG_LEN = 16

-- Bit operations: bit32 (Lua 5.2, Wireshark up to 4.2) or Wireshark's
-- BitOp module; on Lua 5.3+ without either, the native operators, compiled
-- from a string so that a Lua 5.2 parser never sees them.
local band, bxor, rshift
local bits = rawget(_G, "bit32") or rawget(_G, "bit")
if bits then
    band, bxor, rshift = bits.band, bits.bxor, bits.rshift
else
    band, bxor, rshift = load([[
        return function(a, b) return a & b end,
               function(a, b) return a ~ b end,
               function(a, n) return (a & 0xFFFFFFFF) >> n end
    ]])()
end

local p_llc = Proto("llcstack", "LLC stack transport")
local p_msg = Proto("llcmsg", "LLC stack message layer")

local frame_types = {
    [1] = "SYN", [2] = "SYN-ACK", [3] = "DATA", [4] = "ACK",
    [5] = "RESET", [6] = "PING", [7] = "CLOSE",
}
local checksum_status = { [0] = "Bad", [1] = "Good", [2] = "Unverified" }

local f = {
    version = ProtoField.uint8("llcstack.version", "Version", base.DEC),
    type = ProtoField.uint8("llcstack.type", "Type", base.DEC, frame_types),
    flags = ProtoField.uint8("llcstack.flags", "Flags", base.HEX),
    flag_last = ProtoField.bool("llcstack.flags.last_fragment", "LAST_FRAGMENT", 8, nil, 0x01),
    flag_ack_now = ProtoField.bool("llcstack.flags.ack_now", "ACK_NOW", 8, nil, 0x02),
    flag_auth = ProtoField.bool("llcstack.flags.auth", "AUTH", 8, nil, 0x04),
    flag_ack_soon = ProtoField.bool("llcstack.flags.ack_soon", "ACK_SOON", 8, nil, 0x08),
    sack_count = ProtoField.uint8("llcstack.sack_count", "SACK count", base.DEC),
    src_port = ProtoField.uint16("llcstack.src_port", "Source port", base.DEC),
    dst_port = ProtoField.uint16("llcstack.dst_port", "Destination port", base.DEC),
    port = ProtoField.uint16("llcstack.port", "Port", base.DEC),
    src_cookie = ProtoField.uint32("llcstack.src_cookie", "Source cookie", base.HEX),
    dst_cookie = ProtoField.uint32("llcstack.dst_cookie", "Destination cookie", base.HEX),
    seq = ProtoField.uint32("llcstack.seq", "Sequence number", base.DEC),
    ack = ProtoField.uint32("llcstack.ack", "Acknowledgement", base.DEC),
    window_end = ProtoField.uint32("llcstack.window_end", "Window end", base.DEC),
    msg_id = ProtoField.uint32("llcstack.msg_id", "Message id", base.DEC),
    msg_len = ProtoField.uint32("llcstack.msg_len", "Message length", base.DEC),
    mtu = ProtoField.uint32("llcstack.mtu", "Link MTU", base.DEC),
    frag_off = ProtoField.uint32("llcstack.frag_off", "Fragment offset", base.DEC),
    payload_len = ProtoField.uint16("llcstack.payload_len", "Payload length", base.DEC),
    max_ack_delay = ProtoField.uint32("llcstack.max_ack_delay", "Max ACK delay (us)", base.DEC),
    ack_delay = ProtoField.uint16("llcstack.ack_delay", "ACK delay (us)", base.DEC),
    ts_val = ProtoField.uint32("llcstack.ts_val", "Timestamp value (us)", base.DEC),
    ts_ecr = ProtoField.uint32("llcstack.ts_ecr", "Timestamp echo (us)", base.DEC),
    crc = ProtoField.uint32("llcstack.crc", "CRC32C", base.HEX),
    crc_status = ProtoField.uint8("llcstack.crc.status", "CRC32C status", base.DEC, checksum_status),
    crc_calc = ProtoField.uint32("llcstack.crc.calculated", "Calculated CRC32C", base.HEX),
    sack = ProtoField.bytes("llcstack.sack", "SACK block"),
    sack_start = ProtoField.uint32("llcstack.sack.start", "Start", base.DEC),
    sack_end = ProtoField.uint32("llcstack.sack.end", "End", base.DEC),
    payload = ProtoField.bytes("llcstack.payload", "Payload"),
    auth_tag = ProtoField.bytes("llcstack.auth_tag", "Authentication tag"),
    padding = ProtoField.bytes("llcstack.padding", "Padding"),
    retransmission = ProtoField.framenum("llcstack.retransmission_of", "Retransmission of frame", base.NONE),
    reassembled_in = ProtoField.framenum("llcstack.reassembled_in", "Reassembled in frame", base.NONE),
    fragments = ProtoField.string("llcstack.fragments", "Fragments (frames)"),
    reassembled_len = ProtoField.uint32("llcstack.reassembled.length", "Reassembled message length", base.DEC),
}
p_llc.fields = f

local ef = {
    bad_crc = ProtoExpert.new("llcstack.crc.bad", "Bad CRC32C: the stack drops this frame",
        expert.group.CHECKSUM, expert.severity.WARN),
    malformed = ProtoExpert.new("llcstack.malformed", "Malformed transport frame: the stack drops it",
        expert.group.MALFORMED, expert.severity.ERROR),
    retransmission = ProtoExpert.new("llcstack.retransmission", "Retransmission",
        expert.group.SEQUENCE, expert.severity.NOTE),
    reset = ProtoExpert.new("llcstack.reset", "Connection reset (no such connection or no listener)",
        expert.group.SEQUENCE, expert.severity.WARN),
}
p_llc.experts = { ef.bad_crc, ef.malformed, ef.retransmission, ef.reset }

local prefs = p_llc.prefs
prefs.sap = Pref.uint("SAP", DEFAULT_SAP, "LLC SAP the transport uses (llc-stack's default is 0x7C)")
prefs.messages = Pref.bool("Decode message-layer packets", true,
    "Read the messages as docs/MESSAGES.md packets (48-byte header and body)")
prefs.reassemble = Pref.bool("Reassemble messages", true,
    "Join the fragments of multi-frame messages and decode the whole message")

-- CRC32C (Castagnoli, reflected polynomial 0x82F63B78), table driven.
local crc_table = {}
for i = 0, 255 do
    local c = i
    for _ = 1, 8 do
        if band(c, 1) ~= 0 then
            c = bxor(rshift(c, 1), 0x82F63B78)
        else
            c = rshift(c, 1)
        end
    end
    crc_table[i] = c
end

local function crc32c_update(crc, bytes)
    for i = 0, bytes:len() - 1 do
        crc = bxor(crc_table[band(bxor(crc, bytes:get_index(i)), 0xFF)], rshift(crc, 8))
    end
    return crc
end

local function u32(x)
    return x % 4294967296
end

-- The LLC header bytes (DSAP, SSAP, control) are outside the tvb the LLC
-- dissector hands us, but the CRC covers them: read them from its fields.
local llc_dsap_f = Field.new("llc.dsap")
local llc_ssap_f = Field.new("llc.ssap")
local llc_ctrl_f = Field.new("llc.control")

local function last(extractor)
    local all = { extractor() }
    return all[#all]
end

local function llc_header_bytes()
    local d, s, c = last(llc_dsap_f), last(llc_ssap_f), last(llc_ctrl_f)
    if not (d and s and c) then
        return nil
    end
    local b = ByteArray.new()
    b:append(d.range:bytes())
    b:append(s.range:bytes())
    b:append(c.range:bytes())
    return b
end

-- Per-capture analysis state, filled on the first pass over the frames.
local first_sent      -- key(conn, seq) -> frame number of the first transmission
local retrans_of      -- frame number -> frame number of the first transmission
local partial         -- key(conn, msg_id) -> message being reassembled
local reassembled     -- frame number -> { bytes = ByteArray, frames = "1,2,3" }
local reassembled_in  -- frame number -> frame number completing its message

local function reset_state()
    first_sent, retrans_of, partial, reassembled, reassembled_in = {}, {}, {}, {}, {}
end
reset_state()
p_llc.init = reset_state

local msg_kinds = {
    [1] = "Hello", [2] = "Eager", [3] = "Rts", [4] = "Cts", [5] = "Data", [6] = "Am",
    [7] = "Put", [8] = "Get", [9] = "GetReply", [10] = "PutAck", [11] = "Credit", [12] = "Done",
    [13] = "Bundle",
}

local m = {
    kind = ProtoField.uint8("llcmsg.kind", "Kind", base.DEC, msg_kinds),
    flags = ProtoField.uint8("llcmsg.flags", "Flags", base.HEX),
    flag_last = ProtoField.bool("llcmsg.flags.last", "LAST", 8, nil, 0x01),
    flag_refused = ProtoField.bool("llcmsg.flags.refused", "REFUSED", 8, nil, 0x02),
    flag_bundles = ProtoField.bool("llcmsg.flags.bundles", "BUNDLES (Hello: takes bundles)", 8, nil, 0x04),
    flag_untagged = ProtoField.bool("llcmsg.flags.untagged", "UNTAGGED (Eager, Rts: libfabric FI_MSG)", 8, nil, 0x08),
    flag_remote_data = ProtoField.bool("llcmsg.flags.remote_data", "REMOTE_DATA (Eager, Rts: aux is the remote data)", 8, nil, 0x10),
    am = ProtoField.uint16("llcmsg.am", "Active-message handler", base.DEC),
    credit = ProtoField.uint32("llcmsg.credit", "Credit returned (bytes)", base.DEC),
    tag = ProtoField.uint32("llcmsg.tag", "Tag", base.DEC),
    context = ProtoField.uint32("llcmsg.context", "Context", base.DEC),
    id = ProtoField.uint64("llcmsg.id", "Id", base.HEX),
    aux = ProtoField.uint64("llcmsg.aux", "Aux id", base.HEX),
    offset = ProtoField.uint64("llcmsg.offset", "Offset", base.DEC),
    len = ProtoField.uint64("llcmsg.len", "Length", base.DEC),
    address = ProtoField.string("llcmsg.address", "Sender's address"),
    body = ProtoField.bytes("llcmsg.body", "Body"),
}
p_msg.fields = m

local function plausible_msg(tvb)
    if tvb:len() < MSG_HEADER_LEN then
        return false
    end
    local kind = tvb(0, 1):uint()
    return msg_kinds[kind] ~= nil and band(tvb(1, 1):uint(), 0xE0) == 0
end

-- Decodes one message-layer packet: `tvb` holds the whole message, or only
-- its first fragment (`partial_len` then gives the message's full length).
local function dissect_msg(tvb, pinfo, tree, partial_len)
    local kind = tvb(0, 1):uint()
    local total = partial_len or tvb:len()
    local t = tree:add(p_msg, tvb(), "LLC stack message layer, " .. msg_kinds[kind])
    t:add(m.kind, tvb(0, 1))
    local ft = t:add(m.flags, tvb(1, 1))
    ft:add(m.flag_last, tvb(1, 1))
    ft:add(m.flag_refused, tvb(1, 1))
    ft:add(m.flag_bundles, tvb(1, 1))
    ft:add(m.flag_untagged, tvb(1, 1))
    ft:add(m.flag_remote_data, tvb(1, 1))
    t:add_le(m.am, tvb(2, 2))
    t:add_le(m.credit, tvb(4, 4))
    t:add_le(m.tag, tvb(8, 4))
    t:add_le(m.context, tvb(12, 4))
    t:add_le(m.id, tvb(16, 8))
    t:add_le(m.aux, tvb(24, 8))
    t:add_le(m.offset, tvb(32, 8))
    t:add_le(m.len, tvb(40, 8))
    local info = msg_kinds[kind]
    if kind == 2 or kind == 3 then
        local flags = tvb(1, 1):uint()
        if band(flags, 0x08) ~= 0 then
            info = string.format("%s untagged len=%s", info, tostring(tvb(40, 8):le_uint64()))
        else
            info = string.format("%s tag=%d ctx=%d len=%s", info, tvb(8, 4):le_uint(),
                tvb(12, 4):le_uint(), tostring(tvb(40, 8):le_uint64()))
        end
        if band(flags, 0x10) ~= 0 then
            info = info .. " data=0x" .. tvb(24, 8):le_uint64():tohex()
        end
    elseif kind == 6 then
        info = string.format("%s handler=%d len=%d", info, tvb(2, 2):le_uint(), total - MSG_HEADER_LEN)
    elseif kind == 5 or kind == 7 or kind == 9 then
        info = string.format("%s offset=%s", info, tostring(tvb(32, 8):le_uint64()))
    end
    if tvb:len() > MSG_HEADER_LEN then
        local body = tvb(MSG_HEADER_LEN)
        if kind == 1 then
            t:add(m.address, body)
            info = info .. " " .. body:string()
        elseif kind == 13 then
            -- Each packet of the bundle after its 16-bit length, as a subtree.
            info = string.format("%s of %s", info, tostring(tvb(40, 8):le_uint64()))
            local off = MSG_HEADER_LEN
            while off + 2 <= tvb:len() do
                local n = tvb(off, 2):le_uint()
                if n < MSG_HEADER_LEN or off + 2 + n > tvb:len() then
                    break
                end
                local item = tvb(off + 2, n):tvb()
                if plausible_msg(item) then
                    local sub = t:add(p_msg, item(), "Bundled " .. msg_kinds[item(0, 1):uint()])
                    sub:add(m.kind, item(0, 1))
                    sub:add_le(m.am, item(2, 2))
                    sub:add_le(m.tag, item(8, 4))
                    sub:add_le(m.len, item(40, 8))
                    if n > MSG_HEADER_LEN then
                        sub:add(m.body, item(MSG_HEADER_LEN))
                    end
                end
                off = off + 2 + n
            end
        else
            t:add(m.body, body)
        end
    end
    if partial_len then
        t:append_text(string.format(" (first fragment, message of %d bytes)", partial_len))
    end
    pinfo.cols.info:append(" | " .. info)
end

local function conn_key(pinfo, tvb)
    -- Source MAC, ports and the sender's cookie name one direction of one
    -- connection incarnation.
    return tostring(pinfo.dl_src) .. "/" .. tvb(4, 2):uint() .. "/" .. tvb(6, 2):uint()
        .. "/" .. tvb(8, 4):uint()
end

-- First pass: collect fragments; returns nothing, fills `reassembled`.
local function collect_fragment(pinfo, key, msg_len, frag_off, payload)
    local msg = partial[key]
    if not msg then
        msg = { len = msg_len, got = 0, parts = {}, frames = {} }
        partial[key] = msg
    end
    if msg.len ~= msg_len or msg.parts[frag_off] then
        return
    end
    msg.parts[frag_off] = payload:bytes()
    msg.got = msg.got + payload:len()
    table.insert(msg.frames, pinfo.number)
    if msg.got < msg.len then
        return
    end
    local offs = {}
    for off in pairs(msg.parts) do
        table.insert(offs, off)
    end
    table.sort(offs)
    local whole = ByteArray.new()
    for _, off in ipairs(offs) do
        whole:append(msg.parts[off])
    end
    reassembled[pinfo.number] = { bytes = whole, frames = table.concat(msg.frames, ",") }
    for _, n in ipairs(msg.frames) do
        reassembled_in[n] = pinfo.number
    end
    partial[key] = nil
end

function p_llc.dissector(tvb, pinfo, tree)
    local len = tvb:len()
    if len < HEADER_LEN then
        return 0
    end
    pinfo.cols.protocol = "LLCSTACK"
    local kind = tvb(1, 1):uint()
    local flags = tvb(2, 1):uint()
    local sack_count = tvb(3, 1):uint()
    local payload_len = tvb(40, 2):uint()
    local auth = band(flags, 0x04) ~= 0
    local total = HEADER_LEN + 8 * sack_count + payload_len
    local signed = total + (auth and TAG_LEN or 0)

    local t = tree:add(p_llc, tvb(0, math.min(signed, len)), "LLC stack transport")
    t:add(f.version, tvb(0, 1))
    t:add(f.type, tvb(1, 1))
    local ft = t:add(f.flags, tvb(2, 1))
    ft:add(f.flag_last, tvb(2, 1))
    ft:add(f.flag_ack_now, tvb(2, 1))
    ft:add(f.flag_auth, tvb(2, 1))
    ft:add(f.flag_ack_soon, tvb(2, 1))
    t:add(f.sack_count, tvb(3, 1))
    t:add(f.src_port, tvb(4, 2))
    t:add(f.dst_port, tvb(6, 2))
    t:add(f.port, tvb(4, 2)):set_hidden()
    t:add(f.port, tvb(6, 2)):set_hidden()
    t:add(f.src_cookie, tvb(8, 4))
    t:add(f.dst_cookie, tvb(12, 4))
    t:add(f.seq, tvb(16, 4))
    t:add(f.ack, tvb(20, 4))
    t:add(f.window_end, tvb(24, 4))
    t:add(f.msg_id, tvb(28, 4))
    if kind == 1 or kind == 2 then
        t:add(f.mtu, tvb(32, 4))
        t:add(f.max_ack_delay, tvb(36, 4))
    end
    t:add(f.msg_len, tvb(32, 4))
    t:add(f.frag_off, tvb(36, 4))
    t:add(f.payload_len, tvb(40, 2))
    t:add(f.ack_delay, tvb(42, 2))
    t:add(f.ts_val, tvb(44, 4))
    t:add(f.ts_ecr, tvb(48, 4))
    local crc_item = t:add(f.crc, tvb(52, 4))

    local name = frame_types[kind] or string.format("type %d", kind)
    local src_port, dst_port = tvb(4, 2):uint(), tvb(6, 2):uint()
    local info = string.format("%s %d → %d seq=%d ack=%d win=%d", name, src_port, dst_port,
        tvb(16, 4):uint(), tvb(20, 4):uint(), tvb(24, 4):uint())
    if kind == 3 then
        info = info .. string.format(" msg=%d off=%d len=%d", tvb(28, 4):uint(), tvb(36, 4):uint(), payload_len)
    end
    local fl = {}
    if band(flags, 0x01) ~= 0 then table.insert(fl, "LAST") end
    if band(flags, 0x02) ~= 0 then table.insert(fl, "ACK_NOW") end
    if band(flags, 0x04) ~= 0 then table.insert(fl, "AUTH") end
    if band(flags, 0x08) ~= 0 then table.insert(fl, "ACK_SOON") end
    if #fl > 0 then
        info = info .. " [" .. table.concat(fl, ",") .. "]"
    end
    if sack_count > 0 and sack_count <= 4 and len >= HEADER_LEN + 8 * sack_count then
        local sacks = {}
        for i = 0, sack_count - 1 do
            local at = HEADER_LEN + 8 * i
            local st = t:add(f.sack, tvb(at, 8))
            st:add(f.sack_start, tvb(at, 4))
            st:add(f.sack_end, tvb(at + 4, 4))
            local s, e = tvb(at, 4):uint(), tvb(at + 4, 4):uint()
            st:set_text(string.format("SACK block: %d-%d", s, e))
            table.insert(sacks, string.format("%d-%d", s, e))
        end
        info = info .. " SACK " .. table.concat(sacks, " ")
    end
    pinfo.cols.info = info

    -- Structure checks the receiver makes (PROTOCOL.md 3, 3.1).
    local problem
    -- Version 4 (issue 43): NH-POLYVAL-AES tags with one NH pass over a long
    -- frame's body, no CRC on authenticated frames (version 3 took two NH
    -- passes from the first block on, version 2's tags had no NH).
    if tvb(0, 1):uint() ~= 4 then
        problem = "unknown version " .. tvb(0, 1):uint()
    elseif sack_count > 4 then
        problem = "more than 4 SACK blocks"
    elseif signed > len then
        problem = string.format("declared lengths (%d bytes) exceed the frame (%d)", signed, len)
    end
    if problem then
        t:add_proto_expert_info(ef.malformed, "Malformed: " .. problem)
        pinfo.cols.info:append(" [MALFORMED: " .. problem .. "]")
        return len
    end

    -- The CRC covers the LLC header, the transport header with the CRC field
    -- zero, the SACK blocks and the payload. An authenticated frame has none
    -- (PROTOCOL.md 3.3): its field is zero and its tag, which needs the key,
    -- is its only check.
    local crc_ok
    local llc = llc_header_bytes()
    if auth then
        local wire = tvb(52, 4):uint()
        crc_ok = wire == 0
        t:add(f.crc_status, tvb(52, 4), crc_ok and 2 or 0):set_generated()
        if crc_ok then
            crc_item:append_text(" [not used: the authentication tag covers the frame]")
        else
            crc_item:append_text(" [must be zero with AUTH]")
            crc_item:add_proto_expert_info(ef.bad_crc,
                string.format("CRC field 0x%08x of an authenticated frame is not zero: the stack drops this frame", wire))
            pinfo.cols.info:append(" [BAD CRC]")
        end
    elseif llc then
        local c = crc32c_update(0xFFFFFFFF, llc)
        c = crc32c_update(c, tvb(0, 52):bytes())
        c = crc32c_update(c, ByteArray.new("00000000"))
        if signed > HEADER_LEN then
            c = crc32c_update(c, tvb(HEADER_LEN, signed - HEADER_LEN):bytes())
        end
        c = u32(bxor(c, 0xFFFFFFFF))
        local wire = tvb(52, 4):uint()
        crc_ok = c == wire
        t:add(f.crc_calc, tvb(52, 4), c):set_generated()
        t:add(f.crc_status, tvb(52, 4), crc_ok and 1 or 0):set_generated()
        if crc_ok then
            crc_item:append_text(" [correct]")
        else
            crc_item:append_text(string.format(" [incorrect, should be 0x%08x]", c))
            crc_item:add_proto_expert_info(ef.bad_crc,
                string.format("Bad CRC32C 0x%08x, computed 0x%08x: the stack drops this frame", wire, c))
            pinfo.cols.info:append(" [BAD CRC]")
        end
    end

    local payload_at = HEADER_LEN + 8 * sack_count
    local payload
    if payload_len > 0 then
        payload = tvb(payload_at, payload_len)
        t:add(f.payload, payload)
    end
    if auth then
        t:add(f.auth_tag, tvb(total, TAG_LEN))
    end
    if len > signed then
        t:add(f.padding, tvb(signed))
    end

    if kind == 5 then
        t:add_proto_expert_info(ef.reset)
    end
    -- Analysis and reassembly trust only frames the stack would accept.
    if not crc_ok then
        return len
    end
    local key = conn_key(pinfo, tvb)
    if kind == 3 or kind == 7 then
        if not pinfo.visited then
            local skey = key .. "#" .. tvb(16, 4):uint()
            local first = first_sent[skey]
            if first and first ~= pinfo.number then
                retrans_of[pinfo.number] = first
            elseif not first then
                first_sent[skey] = pinfo.number
            end
        end
        local first = retrans_of[pinfo.number]
        if first then
            t:add(f.retransmission, first):set_generated()
            t:add_proto_expert_info(ef.retransmission,
                string.format("Retransmission of frame %d", first))
            pinfo.cols.info:prepend("[Retransmission] ")
        end
    end
    if kind ~= 3 then
        return len
    end

    local msg_len = tvb(32, 4):uint()
    local frag_off = tvb(36, 4):uint()
    local msg_id = tvb(28, 4):uint()
    local whole_msg = frag_off == 0 and payload_len == msg_len
    if not whole_msg and payload and prefs.reassemble then
        if not pinfo.visited then
            collect_fragment(pinfo, key .. "@" .. msg_id, msg_len, frag_off, payload)
        end
        local done = reassembled[pinfo.number]
        if done then
            local rtvb = done.bytes:tvb("Reassembled message")
            t:add(f.reassembled_len, rtvb(), rtvb:len()):set_generated()
            t:add(f.fragments, done.frames):set_generated()
            if prefs.messages and plausible_msg(rtvb) then
                dissect_msg(rtvb, pinfo, tree)
            end
            return len
        end
        local target = reassembled_in[pinfo.number]
        if target and target ~= pinfo.number then
            t:add(f.reassembled_in, target):set_generated()
        end
    end
    if prefs.messages and payload and frag_off == 0 and plausible_msg(payload:tvb()) then
        dissect_msg(payload:tvb(), pinfo, tree, (not whole_msg) and msg_len or nil)
    end
    return len
end

local registered_sap
local function register()
    local dsap = DissectorTable.get("llc.dsap")
    if registered_sap then
        dsap:remove(registered_sap, p_llc)
    end
    registered_sap = prefs.sap
    dsap:add(registered_sap, p_llc)
end

function p_llc.prefs_changed()
    if registered_sap ~= prefs.sap then
        register()
    end
end

register()
