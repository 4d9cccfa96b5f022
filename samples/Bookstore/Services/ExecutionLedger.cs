using Microsoft.AspNetCore.Http;
using PersistentServices;

namespace Bookstore.Services;

/// <summary>
/// An independent count of executions, kept by the application in shared state (so it survives crashes like any
/// inventory): per session, the highest request number executed. Requests of a session are numbered 1, 2, 3 … and a
/// session runs one at a time, so an execution whose number is not above that session's highest is a second
/// execution of a request (of a buyer at BookSeller, of a call at a Bookstore): the crash test asserts there are none.
/// </summary>
internal sealed class ExecutionLedger(string name)
{
    private readonly SharedMap<string, long> _highest = new(name + ".HighestExecuted");
    private readonly SharedVariable<LedgerTotals?> _totals = new(name + ".Totals");

    /// <summary>Records this persistent request's execution (call it once, from the endpoint).</summary>
    public void Record(HttpContext context)
    {
        var session = context.Request.Headers["PS-Session"].ToString();
        var number = long.Parse(context.Request.Headers["PS-Seq"].ToString(), System.Globalization.CultureInfo.InvariantCulture);
        var again = false;
        _highest.Update(session, highest =>
        {
            again = number <= highest;
            return Math.Max(highest, number);
        });
        _totals.Update(t => new LedgerTotals((t?.Executions ?? 0) + 1, (t?.Duplicates ?? 0) + (again ? 1 : 0)));
    }

    /// <summary>The totals (from a read-only request).</summary>
    public LedgerTotals Read() => _totals.Read() ?? new LedgerTotals(0, 0);
}
