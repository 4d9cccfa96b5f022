using System.Globalization;
using System.Text;

namespace PersistentServices.Domain;

/// <summary>
/// A DV on the wire (the <c>PS-DV</c> header): <c>service=epoch.lsn</c> entries joined by commas, e.g.
/// <c>Seller=3.4096,Store1=1.128</c>. About one entry per service of the domain (a service may appear with two epochs
/// around its recovery), so it stays small; parsing is bounded (<see cref="MaxEntriesPerMember"/> per member) and refuses
/// anything else.
/// </summary>
internal static class DvHeader
{
    public const int MaxServiceNameLength = 64;

    /// <summary>Entries a DV may hold per member of the domain (one per epoch not yet known to be durable).</summary>
    public const int MaxEntriesPerMember = 4;

    public static string Format(DependencyVector dv)
    {
        var text = new StringBuilder();
        foreach (var (service, state) in dv.Entries)
        {
            if (text.Length > 0)
            {
                text.Append(',');
            }

            text.Append(service).Append('=').Append(state.Epoch.ToString(CultureInfo.InvariantCulture)).Append('.').Append(state.Lsn.ToString(CultureInfo.InvariantCulture));
        }

        return text.ToString();
    }

    /// <summary>Parses at most <paramref name="maxEntries"/> entries of known services; null (with <paramref name="error"/>) for anything else.</summary>
    public static DependencyVector? Parse(string? text, int maxEntries, Func<string, bool> isMember, out string? error)
    {
        error = null;
        var dv = DependencyVector.Empty;
        if (string.IsNullOrEmpty(text))
        {
            return dv;
        }

        if (text.Length > maxEntries * (MaxServiceNameLength + 42))
        {
            error = "a DV longer than the domain allows";
            return null;
        }

        var parts = text.Split(',');
        if (parts.Length > maxEntries)
        {
            error = $"a DV of {parts.Length} entries, more than the {maxEntries} this domain allows ({MaxEntriesPerMember} per member: one per epoch not known durable)";
            return null;
        }

        foreach (var part in parts)
        {
            var equals = part.IndexOf('=', StringComparison.Ordinal);
            var dot = part.LastIndexOf('.');
            if (equals <= 0 || dot < equals ||
                !long.TryParse(part.AsSpan(equals + 1, dot - equals - 1), NumberStyles.None, CultureInfo.InvariantCulture, out var epoch) ||
                !long.TryParse(part.AsSpan(dot + 1), NumberStyles.None, CultureInfo.InvariantCulture, out var lsn))
            {
                error = "a malformed DV entry";
                return null;
            }

            var service = part[..equals];
            if (!isMember(service))
            {
                error = $"a DV entry for '{(service.Length > MaxServiceNameLength ? service[..MaxServiceNameLength] : service)}', which is not a service of this domain";
                return null;
            }

            dv = dv.With(service, new StateId(epoch, lsn));
        }

        return dv;
    }
}
