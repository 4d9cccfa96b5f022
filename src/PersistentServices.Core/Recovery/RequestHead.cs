using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Sessions;

namespace PersistentServices.Recovery;

/// <summary>
/// The fields of a logged request (<see cref="LoggedRequest"/>) the analysis scan needs: whose request it is, its number,
/// its identity and when it arrived. Read straight from the protobuf wire format, skipping the rest (headers, body,
/// principal): the scan visits every request since the scan start, and most are superseded by a later session checkpoint
/// before it ends, so parsing them whole (strings, lists) was most of the scan's time and garbage. Replay parses the
/// requests it runs in full.
/// </summary>
internal readonly record struct RequestHead(SessionId SessionId, long Sequence, byte[] RequestHash, int RequestHashVersion, long ReceivedAtUnixMs)
{
    // Field numbers in records.proto (LoggedRequest).
    private const int SessionIdField = LoggedRequest.SessionIdFieldNumber;
    private const int SequenceField = LoggedRequest.SequenceFieldNumber;
    private const int ReceivedAtField = LoggedRequest.ReceivedAtUnixMsFieldNumber;
    private const int RequestHashField = LoggedRequest.RequestHashFieldNumber;
    private const int RequestHashVersionField = LoggedRequest.RequestHashVersionFieldNumber;

    // Runs for every request the scan visits: optimized at once, not first as tier-0 code (recovery time).
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveOptimization)]
    public static RequestHead Read(LogRecord record)
    {
        ReadOnlySpan<byte> sessionId = default;
        ReadOnlySpan<byte> hash = default;
        long sequence = 0, receivedAt = 0, hashVersion = 0;
        var fields = new WireFields(record.Body.Span, record.Lsn, nameof(LoggedRequest));
        while (fields.Next())
        {
            switch (fields.Field)
            {
                case SessionIdField when fields.IsBytes: sessionId = fields.Bytes; break;
                case RequestHashField when fields.IsBytes: hash = fields.Bytes; break;
                case SequenceField: sequence = fields.Value; break;
                case ReceivedAtField: receivedAt = fields.Value; break;
                case RequestHashVersionField: hashVersion = (uint)fields.Value; break;
            }
        }

        return new RequestHead(SessionId.FromBytes(sessionId), sequence, hash.ToArray(), (int)hashVersion, receivedAt);
    }
}

/// <summary>
/// The fields of a logged reply (<see cref="ReplySent"/>) the analysis scan needs, read as <see cref="RequestHead"/> reads a
/// request. A reply kept whole in the log (<see cref="HasFullReply"/>) is parsed in full by the scan.
/// </summary>
internal readonly record struct ReplyHead(SessionId SessionId, long Sequence, int StatusCode, byte[] ReplyHash, bool HasFullReply)
{
    // Runs for every reply the scan visits: optimized at once, not first as tier-0 code (recovery time).
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveOptimization)]
    public static ReplyHead Read(LogRecord record)
    {
        ReadOnlySpan<byte> sessionId = default;
        ReadOnlySpan<byte> hash = default;
        long sequence = 0, status = 0;
        var full = false;
        var fields = new WireFields(record.Body.Span, record.Lsn, nameof(ReplySent));
        while (fields.Next())
        {
            switch (fields.Field)
            {
                case ReplySent.SessionIdFieldNumber when fields.IsBytes: sessionId = fields.Bytes; break;
                case ReplySent.ReplyHashFieldNumber when fields.IsBytes: hash = fields.Bytes; break;
                case ReplySent.SequenceFieldNumber: sequence = fields.Value; break;
                case ReplySent.StatusCodeFieldNumber: status = fields.Value; break;
                case ReplySent.FullReplyFieldNumber or ReplySent.BodyPartLsnsFieldNumber: full = true; break;
            }
        }

        return new ReplyHead(SessionId.FromBytes(sessionId), sequence, (int)status, hash.ToArray(), full);
    }
}

/// <summary>Walks the fields of a protobuf message in wire format (what the head readers above need of it, nothing else).</summary>
internal ref struct WireFields(ReadOnlySpan<byte> body, long lsn, string message)
{
    private readonly ReadOnlySpan<byte> _body = body;
    private int _at;

    /// <summary>The current field's number.</summary>
    public int Field { get; private set; }

    /// <summary>The current field's wire type (0 varint, 1 fixed 64-bit, 2 length-delimited, 5 fixed 32-bit).</summary>
    public int WireType { get; private set; }

    /// <summary>A length-delimited field: <see cref="Bytes"/> holds it.</summary>
    public bool IsBytes { get; private set; }

    /// <summary>A varint field's value (0 for other wire types).</summary>
    public long Value { get; private set; }

    /// <summary>A length-delimited field's bytes.</summary>
    public ReadOnlySpan<byte> Bytes { get; private set; }

    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveOptimization)]
    public bool Next()
    {
        if (_at >= _body.Length)
        {
            return false;
        }

        var tag = ReadVarint();
        Field = (int)(tag >> 3);
        IsBytes = false;
        Value = 0;
        Bytes = default;
        WireType = (int)(tag & 7);
        switch (WireType)
        {
            case 0:
                Value = (long)ReadVarint();
                break;
            case 1:
                Skip(8);
                break;
            case 2:
                var length = ReadVarint();
                if (length > (ulong)(_body.Length - _at))
                {
                    throw Malformed();
                }

                Bytes = _body.Slice(_at, (int)length);
                IsBytes = true;
                _at += (int)length;
                break;
            case 5:
                Skip(4);
                break;
            default:
                throw Malformed();
        }

        return true;
    }

    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveInlining)]
    private ulong ReadVarint()
    {
        ulong result = 0;
        for (var shift = 0; shift < 64; shift += 7)
        {
            if (_at >= _body.Length)
            {
                throw Malformed();
            }

            var b = _body[_at++];
            result |= (ulong)(b & 0x7F) << shift;
            if (b < 0x80)
            {
                return result;
            }
        }

        throw Malformed();
    }

    private void Skip(int count)
    {
        if (_body.Length - _at < count)
        {
            throw Malformed();
        }

        _at += count;
    }

    private readonly LogFormatException Malformed() =>
        new($"The record at LSN {lsn} is not a valid {message} message (its checksum is intact: a build wrote what it cannot read).");
}
