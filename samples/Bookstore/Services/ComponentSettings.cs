namespace Bookstore.Services;

/// <summary>
/// What a component process is told by the launcher (configuration section <c>Bookstore</c>, from environment variables
/// <c>Bookstore__…</c>). The library's own options come from the section <c>PersistentServices</c> (service name, log
/// directory, peer key, <c>Calls:Logging</c>, <c>Calls:UseRoles</c>).
/// </summary>
internal sealed class ComponentSettings
{
    /// <summary>The stores, <c>store-1=http://127.0.0.1:5601;store-2=…</c> (PriceGrabber and BookSeller call them).</summary>
    public string Stores { get; set; } = "";

    /// <summary>The TaxCalculator's base address (BookSeller calls it).</summary>
    public string? TaxUrl { get; set; }

    /// <summary>The launcher's process id: the component stops when the launcher is gone (no orphans after a kill of the launcher).</summary>
    public int ParentPid { get; set; }

    /// <summary>
    /// The build this process plays (README.md, "Upgrades"): 1, or 2, the changed build <c>--upgrade</c> rolls out, whose
    /// replies to <c>/basket/add</c> carry a field the first build's do not (<see cref="AddResult.Build"/>).
    /// </summary>
    public int Build { get; set; } = 1;

    /// <summary>
    /// Networks whose proxies' <c>X-Forwarded-For</c> this service believes, as CIDRs separated by commas
    /// (<c>10.0.0.0/8</c>); empty: loopback only. Behind the gateway in a cluster the gateway's pods are not on loopback:
    /// without this every client would have a gateway pod's address, and one client's flood would use up the share
    /// (<c>MaxSessionsPerAddress</c>) of everyone behind that pod. Name only networks nothing but your proxies can
    /// send from (the pod network, when the services are reachable only inside the cluster).
    /// </summary>
    public string TrustedProxyNetworks { get; set; } = "";

    /// <summary>The trusted proxy networks, parsed; a malformed entry stops the start with its text.</summary>
    public IReadOnlyList<System.Net.IPNetwork> ParseTrustedProxyNetworks()
        => TrustedProxyNetworks.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries)
            .Select(entry => System.Net.IPNetwork.TryParse(entry, out var network)
                ? network
                : throw new InvalidOperationException($"Bookstore:TrustedProxyNetworks: '{entry}' is not a network in CIDR notation (10.0.0.0/8)"))
            .ToList();

    /// <summary>The stores as (name, address) pairs.</summary>
    public IReadOnlyList<(string Name, Uri Url)> ParseStores()
        => Stores.Split(';', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries)
            .Select(entry => entry.Split('=', 2))
            .Select(parts => parts.Length == 2
                ? (parts[0], new Uri(parts[1]))
                : throw new InvalidOperationException($"Bookstore:Stores: '{string.Join('=', parts)}' is not name=url"))
            .ToList();
}
