using System.Globalization;
using System.Text.Json;

namespace PersistentServices.CrashHarness;

/// <summary>
/// The serial-order checker of the inventory scenario. Every adjustment takes a ticket from a shared counter while it
/// holds its SKU's lock, so ticket order is a serial order of all adjustments. From the client side only, it checks that
/// the acknowledged replies and the final state are explained by that one serial order:
/// <list type="bullet">
/// <item>the acknowledged tickets are exactly 1..N (a duplicate ticket or a gap means an operation executed twice, or
///   one that nobody acknowledged executed), and the service's ticket counter is N;</item>
/// <item>applying the acknowledged adjustments in ticket order to an empty inventory (stock never below zero)
///   reproduces every reply's version and quantity, and the final stock of every SKU.</item>
/// </list>
/// </summary>
internal static class InventoryChecker
{
    public const int Skus = 4;

    /// <summary>
    /// Right after a recovery: the ticket counter and every SKU's version must be at least what was acknowledged before
    /// the kill (no acknowledged adjustment lost by the crash). Later acknowledgements only move them up.
    /// </summary>
    public static async Task<List<string>> CheckAfterRecoveryAsync(HttpClient http, Options options, List<InventoryAck> acknowledged, int kill, CancellationToken cancellationToken)
    {
        var problems = new List<string>();
        if (acknowledged.Count == 0)
        {
            return problems;
        }

        var (tickets, stock) = await ReadStateAsync(http, options, cancellationToken).ConfigureAwait(false);
        if (tickets is null)
        {
            problems.Add($"after kill {kill}: the inventory could not be read");
            return problems;
        }

        var maxTicket = acknowledged.Max(a => a.Ticket);
        if (tickets < maxTicket)
        {
            problems.Add($"after kill {kill}: the ticket counter is {tickets} but ticket {maxTicket} was acknowledged before the kill: LOST");
        }

        foreach (var latest in acknowledged.GroupBy(a => a.Sku).Select(g => g.MaxBy(a => a.Version)!))
        {
            if (stock![latest.Sku].Version < latest.Version)
            {
                problems.Add($"after kill {kill}: {latest.Sku} is at version {stock[latest.Sku].Version} but version {latest.Version} was acknowledged before the kill: LOST");
            }
        }

        return problems;
    }

    private static async Task<(long? Tickets, Dictionary<string, (long Version, int Quantity)>? Stock)> ReadStateAsync(HttpClient http, Options options, CancellationToken cancellationToken)
    {
        var query = string.Join('&', Enumerable.Range(0, Skus).Select(i => "sku=sku-" + i.ToString(CultureInfo.InvariantCulture)));
        for (var attempt = 0; attempt < 100; attempt++)
        {
            try
            {
                using var response = await http.GetAsync($"{options.StatePath}?{query}", cancellationToken).ConfigureAwait(false);
                if (response.IsSuccessStatusCode)
                {
                    using var json = JsonDocument.Parse(await response.Content.ReadAsStringAsync(cancellationToken).ConfigureAwait(false));
                    var stock = new Dictionary<string, (long, int)>(StringComparer.Ordinal);
                    foreach (var entry in json.RootElement.GetProperty("stock").EnumerateObject())
                    {
                        stock[entry.Name] = (entry.Value.GetProperty("version").GetInt64(), entry.Value.GetProperty("quantity").GetInt32());
                    }

                    return (json.RootElement.GetProperty("tickets").GetInt64(), stock);
                }
            }
            catch (HttpRequestException)
            {
            }

            await Task.Delay(50, cancellationToken).ConfigureAwait(false);
        }

        return (null, null);
    }

    public static async Task<Verdict> VerifyAsync(HttpClient http, Options options, IReadOnlyList<InventoryAck> acks, CancellationToken cancellationToken)
    {
        var verdict = new Verdict();
        var query = string.Join('&', Enumerable.Range(0, Skus).Select(i => "sku=sku-" + i.ToString(CultureInfo.InvariantCulture)));
        using var response = await http.GetAsync($"{options.StatePath}?{query}", cancellationToken).ConfigureAwait(false);
        var body = await response.Content.ReadAsStringAsync(cancellationToken).ConfigureAwait(false);
        if (!response.IsSuccessStatusCode)
        {
            verdict.Violations.Add($"inventory: GET {options.StatePath} answered {(int)response.StatusCode} {body}");
            return verdict;
        }

        using var json = JsonDocument.Parse(body);
        var tickets = json.RootElement.GetProperty("tickets").GetInt64();
        var stock = json.RootElement.GetProperty("stock");

        // Tickets: exactly 1..N, each once.
        var byTicket = acks.GroupBy(a => a.Ticket).ToDictionary(g => g.Key, g => g.ToList());
        foreach (var (ticket, same) in byTicket.Where(t => t.Value.Count > 1))
        {
            verdict.Duplicated += same.Count - 1;
            verdict.Findings.Add($"inventory: DUPLICATED ticket {ticket} acknowledged to {string.Join(", ", same.Select(a => a.OpId))}");
        }

        var n = acks.Count;
        var missing = Enumerable.Range(1, n).Where(t => !byTicket.ContainsKey(t)).Take(10).ToList();
        if (missing.Count > 0)
        {
            verdict.Violations.Add($"inventory: tickets {string.Join(", ", missing)} were taken by operations nobody acknowledged (executed twice, or executed unacknowledged)");
        }

        if (tickets < n)
        {
            verdict.Lost += (int)(n - tickets);
            verdict.Findings.Add($"inventory: LOST: the ticket counter is {tickets} but {n} adjustments were acknowledged");
        }
        else if (tickets > n)
        {
            verdict.Violations.Add($"inventory: the ticket counter is {tickets} but only {n} adjustments were acknowledged: {tickets - n} extra executions");
        }

        // Replay the acknowledged adjustments in ticket order; every reply and the final stock must match.
        var model = new Dictionary<string, (long Version, int Quantity)>(StringComparer.Ordinal);
        var mismatches = 0;
        foreach (var ack in acks.OrderBy(a => a.Ticket))
        {
            var (version, quantity) = model.GetValueOrDefault(ack.Sku);
            var next = (version + 1, Math.Max(0, quantity + ack.Delta));
            model[ack.Sku] = next;
            if ((ack.Version, ack.Quantity) != next && mismatches++ < 10)
            {
                verdict.Violations.Add($"inventory: op {ack.OpId} (ticket {ack.Ticket}, {ack.Sku} {ack.Delta:+0;-0}) answered version {ack.Version} quantity {ack.Quantity}; the serial order gives {next}");
            }
        }

        for (var i = 0; i < Skus; i++)
        {
            var sku = "sku-" + i.ToString(CultureInfo.InvariantCulture);
            var expected = model.GetValueOrDefault(sku);
            var actual = stock.GetProperty(sku);
            var (version, quantity) = (actual.GetProperty("version").GetInt64(), actual.GetProperty("quantity").GetInt32());
            if (version < expected.Version)
            {
                verdict.Lost += (int)(expected.Version - version);
                verdict.Findings.Add($"inventory: LOST {expected.Version - version} acknowledged adjustments of {sku} (version {version}, expected {expected.Version})");
            }
            else if ((version, quantity) != expected)
            {
                verdict.Violations.Add($"inventory: {sku} is version {version} quantity {quantity}; the serial order of the acknowledged adjustments gives {expected}");
            }
        }

        verdict.Findings.Add($"inventory: serial-order check over {n} acknowledged adjustments of {Skus} shared SKUs: ticket counter {tickets}, {mismatches} replies not explained by ticket order");
        return verdict;
    }
}
