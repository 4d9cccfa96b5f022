using System.Buffers.Binary;
using System.Runtime.CompilerServices;
using System.Text;
using Google.Protobuf;
using PersistentServices.Log;
using PersistentServices.Log.Records;

namespace PersistentServices.Recovery;

/// <summary>
/// Reads a logged request (<see cref="LoggedRequest"/>) for replay: the same message the generated parser builds, read
/// straight from the wire format (<see cref="WireFields"/>) by code that is optimized at once, with the strings that repeat
/// from request to request (header names and values, method, host, path, endpoint) taken from a small per-thread cache
/// instead of decoded again. Replay parses every request it runs, mostly in the first seconds after a start, while the
/// JIT still runs the generated parser as instrumented tier-0 code: it took 13 % of the replay workers' time
/// (docs/benchmarks.md "Replay rate: where a short replay's time goes"). The rarely present nested messages (a principal,
/// a DV) go to their generated parsers. <c>ReplayRequestReaderTests</c> holds it equal to the generated parser.
/// </summary>
internal static class ReplayRequestReader
{
    [ThreadStatic]
    private static Utf8StringCache? t_strings;

    [MethodImpl(MethodImplOptions.AggressiveOptimization)]
    public static LoggedRequest Read(LogRecord record)
    {
        var strings = t_strings ??= new Utf8StringCache();
        var request = new LoggedRequest();
        var fields = new WireFields(record.Body.Span, record.Lsn, nameof(LoggedRequest));
        while (fields.Next())
        {
            switch (fields.Field)
            {
                case LoggedRequest.SessionIdFieldNumber when fields.IsBytes: request.SessionId = ByteString.CopyFrom(fields.Bytes); break;
                case LoggedRequest.SequenceFieldNumber when fields.WireType == 0: request.Sequence = fields.Value; break;
                case LoggedRequest.MethodFieldNumber when fields.IsBytes: request.Method = strings.Get(fields.Bytes); break;
                case LoggedRequest.SchemeFieldNumber when fields.IsBytes: request.Scheme = strings.Get(fields.Bytes); break;
                case LoggedRequest.HostFieldNumber when fields.IsBytes: request.Host = strings.Get(fields.Bytes); break;
                case LoggedRequest.PathBaseFieldNumber when fields.IsBytes: request.PathBase = strings.Get(fields.Bytes); break;
                case LoggedRequest.PathFieldNumber when fields.IsBytes: request.Path = strings.Get(fields.Bytes); break;
                case LoggedRequest.QueryStringFieldNumber when fields.IsBytes: request.QueryString = strings.Get(fields.Bytes); break;
                case LoggedRequest.HeadersFieldNumber when fields.IsBytes: request.Headers.Add(ReadHeader(fields.Bytes, record.Lsn, strings)); break;
                case LoggedRequest.BodyFieldNumber when fields.IsBytes: request.Body = ByteString.CopyFrom(fields.Bytes); break;
                case LoggedRequest.ReceivedAtUnixMsFieldNumber when fields.WireType == 0: request.ReceivedAtUnixMs = fields.Value; break;
                case LoggedRequest.EndpointFieldNumber when fields.IsBytes: request.Endpoint = strings.Get(fields.Bytes); break;
                case LoggedRequest.UserFieldNumber when fields.IsBytes: request.User = LoggedPrincipal.Parser.ParseFrom(fields.Bytes); break;
                case LoggedRequest.RemoteIpFieldNumber when fields.IsBytes: request.RemoteIp = strings.Get(fields.Bytes); break;
                case LoggedRequest.RequestHashFieldNumber when fields.IsBytes: request.RequestHash = ByteString.CopyFrom(fields.Bytes); break;
                case LoggedRequest.CanHaveBodyFieldNumber when fields.WireType == 0: request.CanHaveBody = fields.Value != 0; break;
                case LoggedRequest.RequestHashVersionFieldNumber when fields.WireType == 0: request.RequestHashVersion = (uint)fields.Value; break;
                case LoggedRequest.DvFieldNumber when fields.IsBytes: request.Dv = LoggedDependencyVector.Parser.ParseFrom(fields.Bytes); break;
                default:
                    // A field a later build added (or a known one with another wire type): skipped, as the generated
                    // parser keeps it only as unknown bytes that nothing reads.
                    break;
            }
        }

        return request;
    }

    [MethodImpl(MethodImplOptions.AggressiveOptimization)]
    private static LoggedHeader ReadHeader(ReadOnlySpan<byte> body, long lsn, Utf8StringCache strings)
    {
        var header = new LoggedHeader();
        var fields = new WireFields(body, lsn, nameof(LoggedHeader));
        while (fields.Next())
        {
            switch (fields.Field)
            {
                case LoggedHeader.NameFieldNumber when fields.IsBytes: header.Name = strings.Get(fields.Bytes); break;
                case LoggedHeader.ValuesFieldNumber when fields.IsBytes: header.Values.Add(strings.Get(fields.Bytes)); break;
            }
        }

        return header;
    }

    /// <summary>
    /// Short UTF-8 strings seen recently, by content: a hit returns the same string object without decoding or allocating.
    /// Direct-mapped (one entry per slot, a miss replaces it), so it stays small whatever the log holds.
    /// </summary>
    private sealed class Utf8StringCache
    {
        private const int Slots = 256;
        private const int MaxBytes = 128;
        private readonly byte[]?[] _bytes = new byte[Slots][];
        private readonly string?[] _strings = new string[Slots];

        [MethodImpl(MethodImplOptions.AggressiveOptimization)]
        public string Get(ReadOnlySpan<byte> utf8)
        {
            if (utf8.IsEmpty)
            {
                return "";
            }

            if (utf8.Length > MaxBytes)
            {
                return Encoding.UTF8.GetString(utf8);
            }

            var slot = (int)(Hash(utf8) % Slots);
            if (_bytes[slot] is { } cached && utf8.SequenceEqual(cached))
            {
                return _strings[slot]!;
            }

            var value = Encoding.UTF8.GetString(utf8);
            _bytes[slot] = utf8.ToArray();
            _strings[slot] = value;
            return value;
        }

        // Cheap, not strong: only a slot choice (a hit compares the bytes). Length and the first and last 8 bytes.
        [MethodImpl(MethodImplOptions.AggressiveInlining)]
        private static uint Hash(ReadOnlySpan<byte> utf8)
        {
            ulong h = (ulong)utf8.Length * 0x9E3779B97F4A7C15;
            if (utf8.Length >= 8)
            {
                h ^= BinaryPrimitives.ReadUInt64LittleEndian(utf8);
                h = (h * 0x100000001B3) ^ BinaryPrimitives.ReadUInt64LittleEndian(utf8[^8..]);
            }
            else
            {
                foreach (var b in utf8)
                {
                    h = (h ^ b) * 0x100000001B3;
                }
            }

            h *= 0x9E3779B97F4A7C15;
            return (uint)(h >> 32);
        }
    }
}
