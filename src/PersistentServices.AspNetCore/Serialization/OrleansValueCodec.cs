using Microsoft.Extensions.DependencyInjection;
using Orleans;
using Orleans.Serialization;
using PersistentServices.Log.Records;

namespace PersistentServices.Serialization;

/// <summary>
/// User values through Orleans.Serialization, the design card's serializer. A type that opts in with Orleans'
/// attributes (<c>[GenerateSerializer]</c>, members with <c>[Id(n)]</c>) gets its compact, version-tolerant binary
/// form, and so do primitives and strings; every other type is written as plain System.Text.Json (format JSON), so users
/// annotate nothing, and a type may gain or lose properties, or be renamed or moved, without making its logged values
/// unreadable (Orleans' own JSON codec would store the type's name). Each value records its format; both are read back.
/// </summary>
internal sealed class OrleansValueCodec : ValueCodec
{
    private readonly Serializer _serializer;

    public OrleansValueCodec()
    {
        var services = new ServiceCollection();
        services.AddSerializer();
        _serializer = services.BuildServiceProvider().GetRequiredService<Serializer>();
    }

    /// <summary>What this codec writes for types that opted in; others are written as <see cref="ValueFormat.Json"/>.</summary>
    public override ValueFormat Format => ValueFormat.Orleans;

    public override (byte[] Bytes, ValueFormat Format) Encode<T>(T value)
        => Choice<T>.Orleans ? (_serializer.SerializeToArray(value), ValueFormat.Orleans) : (SerializeJson(value), ValueFormat.Json);

    protected override T DeserializeOwn<T>(ReadOnlySpan<byte> bytes) => _serializer.Deserialize<T>(bytes)!;

    private static class Choice<T>
    {
        public static readonly bool Orleans = Decide(typeof(T));

        private static bool Decide(Type type)
        {
            type = Nullable.GetUnderlyingType(type) ?? type;
            return type.IsPrimitive || type == typeof(string) || type == typeof(decimal) || type == typeof(Guid) ||
                   type.IsDefined(typeof(GenerateSerializerAttribute), inherit: false);
        }
    }
}
