using System.Net;
using System.Net.Sockets;

namespace PersistentServices.Gateway;

/// <summary>
/// The bytes of request bodies the gateway keeps for resending: at most <see cref="PersistentGatewayOptions.MaxBufferedBytes"/>
/// over all requests, and at most <see cref="PersistentGatewayOptions.MaxBufferedBytesPerClient"/> for one client address
/// (an IPv6 client by its /64, as the services' own per-address shares), so that one client's flood of large bodies
/// leaves the rest of the budget to the others (docs/gateway.md, "Configuration").
/// </summary>
internal sealed class BufferBudget(long total, long perClient)
{
    private readonly Lock _lock = new();
    private readonly Dictionary<UInt128, long> _byClient = [];
    private long _held;

    /// <summary>Why a body was refused.</summary>
    public enum Refusal
    {
        None,
        Total,
        Client,
    }

    /// <summary>Bytes held right now over all clients.</summary>
    public long Held
    {
        get
        {
            lock (_lock)
            {
                return _held;
            }
        }
    }

    /// <summary>Clients holding bytes right now (for tests: an entry goes when its client holds nothing).</summary>
    public int Clients
    {
        get
        {
            lock (_lock)
            {
                return _byClient.Count;
            }
        }
    }

    /// <summary>Takes <paramref name="bytes"/> for <paramref name="client"/>, or says which bound refused them. Empty bodies take nothing.</summary>
    public Refusal TryTake(IPAddress? client, long bytes)
    {
        if (bytes == 0)
        {
            return Refusal.None;
        }

        var key = Key(client);
        lock (_lock)
        {
            if (_held + bytes > total)
            {
                return Refusal.Total;
            }

            _byClient.TryGetValue(key, out var mine);
            if (mine + bytes > perClient)
            {
                return Refusal.Client;
            }

            _byClient[key] = mine + bytes;
            _held += bytes;
            return Refusal.None;
        }
    }

    /// <summary>Gives back what <see cref="TryTake"/> took.</summary>
    public void Return(IPAddress? client, long bytes)
    {
        if (bytes == 0)
        {
            return;
        }

        var key = Key(client);
        lock (_lock)
        {
            _held -= bytes;
            var left = _byClient[key] - bytes;
            if (left == 0)
            {
                _byClient.Remove(key);
            }
            else
            {
                _byClient[key] = left;
            }
        }
    }

    /// <summary>
    /// A client's share key: an IPv4 address (also IPv4-mapped IPv6) whole, an IPv6 address by its /64 (one host can
    /// hold a whole /64). A connection without an address (a test server, a Unix socket) shares one key with its kind.
    /// </summary>
    internal static UInt128 Key(IPAddress? address)
    {
        if (address is null)
        {
            return UInt128.MaxValue;
        }

        if (address.IsIPv4MappedToIPv6)
        {
            address = address.MapToIPv4();
        }

        Span<byte> bytes = stackalloc byte[16];
        address.TryWriteBytes(bytes, out _);
        if (address.AddressFamily == AddressFamily.InterNetwork)
        {
            return new UInt128(0, (ulong)bytes[0] << 24 | (ulong)bytes[1] << 16 | (ulong)bytes[2] << 8 | bytes[3]);
        }

        // IPv6: the first 64 bits, tagged so that no /64 equals an IPv4 key.
        return new UInt128(System.Buffers.Binary.BinaryPrimitives.ReadUInt64BigEndian(bytes[..8]), ulong.MaxValue);
    }
}
